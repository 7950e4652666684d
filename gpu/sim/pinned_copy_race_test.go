// Race scenarios for copies from page-locked memory (pinned_copy.go): the
// host must not write a pinned source until the copy that reads it has
// completed; a pageable source it may reuse at once.

package sim_test

func init() {
	scenarios = append(scenarios,
		scenario{"pinned source rewritten while its copy is queued", true, func(v *env) {
			h, err := v.dev.MallocHost(4096)
			check(err)
			release := v.sd.Hold(v.s1)
			check(v.dev.CopyHtoDAsync(v.p, h, v.s1))
			h[0] = 1 // the queued copy reads h when it runs
			release()
			check(v.s1.Synchronize())
			check(v.dev.FreeHost(h))
		}},
		scenario{"pinned source rewritten after its copy completed", false, func(v *env) {
			h, err := v.dev.MallocHost(4096)
			check(err)
			release := v.sd.Hold(v.s1)
			check(v.dev.CopyHtoDAsync(v.p, h, v.s1))
			check(v.e.Record(v.s1))
			release()
			check(v.e.Synchronize())
			h[0] = 1
			check(v.dev.FreeHost(h))
		}},
		scenario{"pageable source rewritten while its copy is queued", false, func(v *env) {
			h := make([]byte, 4096)
			release := v.sd.Hold(v.s1)
			check(v.dev.CopyHtoDAsync(v.p, h, v.s1))
			h[0] = 1 // staged at enqueue time, as the driver does
			release()
			check(v.s1.Synchronize())
		}},
	)
}
