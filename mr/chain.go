// Chains of resources: an adaptor (or a suballocator) wraps an upstream,
// which may wrap another. Walking the chain lets an adaptor reach every
// resource below it, so that Retry can reap the pending frees and release
// the cached memory of all of them, and reports can find the resource that
// knows a statistic.
//
// Invariant: Chain stops at the first resource that does not wrap another,
// and after maxChain steps, so a chain that loops (a programming error)
// cannot hang it.
package mr

// Wrapper is implemented by resources that allocate from another
// resource: Upstream returns it.
type Wrapper interface {
	Upstream() Resource
}

// maxChain bounds the walk in Chain.
const maxChain = 64

// Chain returns r and every resource below it, nearest first: r, its
// upstream, the upstream's upstream, and so on.
func Chain(r Resource) []Resource {
	var out []Resource
	for r != nil && len(out) < maxChain {
		out = append(out, r)
		w, ok := r.(Wrapper)
		if !ok {
			break
		}
		r = w.Upstream()
	}
	return out
}
