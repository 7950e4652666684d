package sim_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// FuzzHappensBefore runs a random program of operations, event records,
// event waits and host synchronizations on three streams, and checks
// HappensBefore for every pair of operations against a reference: the
// reachability relation of the program's dependency graph.
func FuzzHappensBefore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{3, 9, 4, 21, 7, 0, 13, 2, 40, 1})
	f.Add([]byte{50, 51, 52, 53, 54, 55, 56, 57, 58, 59})
	f.Add([]byte{0, 33, 1, 4, 34, 2, 35, 5, 6, 12, 45, 13, 7, 21, 1, 2})       // host synchronizes
	f.Add([]byte{6, 7, 8, 19, 20, 21, 0, 1, 2, 33, 3, 4, 5, 30, 31, 32, 0, 1}) // records, waits, syncs
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 64 {
			prog = prog[:64]
		}
		dev, _ := sim.New(sim.Config{}).Device(0)
		sd := dev.(*sim.Device)
		const nstreams, nevents = 3, 2
		var ss [nstreams]gpu.Stream
		var bufs [nstreams]gpu.DevicePtr
		for i := range ss {
			ss[i], _ = dev.NewStream()
			bufs[i], _ = dev.Malloc(256)
		}
		var es [nevents]gpu.Event
		for i := range es {
			es[i], _ = dev.NewEvent(false)
		}

		// The reference graph: node i is the i-th operation; preds[i] are
		// its direct predecessors.
		var ids []sim.OpID
		var preds [][]int
		last := [nstreams]int{-1, -1, -1} // last node of each stream
		recorded := [nevents]int{-1, -1}  // node of each event's latest record
		var hostKnows []int               // nodes the host has synchronized with
		add := func(s int, extra ...int) {
			ids = append(ids, sd.LastOp(ss[s]))
			p := append([]int(nil), extra...)
			if last[s] >= 0 {
				p = append(p, last[s])
			}
			p = append(p, hostKnows...)
			preds = append(preds, p)
			last[s] = len(ids) - 1
		}
		for _, b := range prog {
			s, x := int(b%nstreams), int(b/nstreams)
			switch x % 4 {
			case 0, 1:
				if err := dev.MemsetD8Async(bufs[s], b, 256, ss[s]); err != nil {
					t.Fatal(err)
				}
				add(s)
			case 2:
				e := (x / 4) % nevents
				if err := es[e].Record(ss[s]); err != nil {
					t.Fatal(err)
				}
				add(s)
				recorded[e] = last[s]
			case 3:
				e := (x / 4) % nevents
				if x/8%2 == 1 {
					if err := ss[s].Synchronize(); err != nil {
						t.Fatal(err)
					}
					if last[s] >= 0 {
						hostKnows = append(hostKnows, last[s])
					}
					continue
				}
				if err := ss[s].WaitEvent(es[e]); err != nil {
					t.Fatal(err)
				}
				if recorded[e] >= 0 {
					add(s, recorded[e])
				} else {
					add(s)
				}
			}
		}
		if err := dev.Synchronize(); err != nil {
			t.Fatal(err)
		}
		// reach[i][j]: node i reaches node j.
		n := len(ids)
		reach := make([][]bool, n)
		for j := range n {
			reach[j] = make([]bool, n)
			for _, p := range preds[j] {
				reach[p][j] = true
				for i := range j {
					if reach[i][p] {
						reach[i][j] = true
					}
				}
			}
		}
		for i := range n {
			for j := range n {
				if got := sd.HappensBefore(ids[i], ids[j]); got != reach[i][j] {
					t.Fatalf("program %v: HappensBefore(%v, %v) = %v, reference %v", prog, ids[i], ids[j], got, reach[i][j])
				}
			}
		}
	})
}
