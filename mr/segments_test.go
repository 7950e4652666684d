package mr_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// segmentResource is a resource that reports segments, with what the test
// needs to know of it.
type segmentResource interface {
	mr.Resource
	mr.SegmentReporter
	mr.UsageReporter
	mr.Releaser
}

// The segments of each suballocator tile what it reserves (less its large
// allocations, which are not segments), in address order, hold every block
// it handed out, name the stream that owns them where the resource has
// one, and are gone after the blocks are freed and the resource released.
func TestAppendSegments(t *testing.T) {
	cases := []struct {
		name string
		make func(up mr.Resource) (segmentResource, error)
		// large is a request the resource passes to its upstream whole
		// (0: none).
		large int
		// owned: segments name the stream whose blocks they hold.
		owned bool
	}{
		{"pool", func(up mr.Resource) (segmentResource, error) {
			return mr.NewPool(up, mr.PoolOptions{})
		}, 0, true},
		{"arena", func(up mr.Resource) (segmentResource, error) {
			return mr.NewArena(up, mr.ArenaOptions{SuperblockSize: 1 << 20})
		}, 3 << 20, true},
		{"fixedsize", func(up mr.Resource) (segmentResource, error) {
			return mr.NewFixedSize(up, mr.FixedSizeOptions{BlockSize: 64 << 10, BlocksPerChunk: 4})
		}, 0, false},
		{"binning", func(up mr.Resource) (segmentResource, error) {
			return mr.NewBinning(up, mr.BinningOptions{MinSize: 256, MaxSize: 64 << 10, BlocksPerChunk: 4})
		}, 1 << 20, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := testdev.Device(t)
			res, err := c.make(mr.NewDirect(dev))
			if err != nil {
				t.Fatal(err)
			}
			s1 := testdev.Must(dev.NewStream())(t)
			s2 := testdev.Must(dev.NewStream())(t)
			defer s1.Destroy()
			defer s2.Destroy()

			if got := res.AppendSegments(nil); len(got) != 0 {
				t.Fatalf("segments of a new resource: %v", got)
			}
			type blk struct {
				p    gpu.DevicePtr
				size int
				s    gpu.Stream
			}
			var blocks []blk
			sizes := []int{256, 4 << 10, 40 << 10, 64 << 10}
			if c.name == "pool" || c.name == "arena" {
				sizes = append(sizes, 300<<10)
			}
			for i := range 24 {
				s := s1
				if i%2 == 1 {
					s = s2
				}
				size := sizes[i%len(sizes)]
				p, err := res.Allocate(size, s)
				if err != nil {
					t.Fatalf("allocate %d: %v", size, err)
				}
				blocks = append(blocks, blk{p, size, s})
			}
			var large gpu.DevicePtr
			if c.large > 0 {
				if large, err = res.Allocate(c.large, s1); err != nil {
					t.Fatal(err)
				}
			}

			segs := res.AppendSegments(make([]mr.Segment, 0, 64))
			var total uint64
			for i, sg := range segs {
				if sg.Size <= 0 {
					t.Errorf("segment %d: size %d", i, sg.Size)
				}
				if i > 0 && segs[i-1].Base+gpu.DevicePtr(segs[i-1].Size) > sg.Base {
					t.Errorf("segments %d and %d out of order or overlapping: %+v %+v", i-1, i, segs[i-1], sg)
				}
				total += uint64(sg.Size)
			}
			if want := res.Usage().Reserved - uint64(c.large); total != want {
				t.Errorf("segments total %d bytes, reserved less large allocations %d", total, want)
			}
			find := func(p gpu.DevicePtr) (mr.Segment, int) {
				var found mr.Segment
				n := 0
				for _, sg := range segs {
					if p >= sg.Base && p < sg.Base+gpu.DevicePtr(sg.Size) {
						found = sg
						n++
					}
				}
				return found, n
			}
			for _, b := range blocks {
				sg, n := find(b.p)
				if n != 1 {
					t.Fatalf("block %#x in %d segments", uint64(b.p), n)
				}
				if b.p+gpu.DevicePtr(b.size) > sg.Base+gpu.DevicePtr(sg.Size) {
					t.Errorf("block %#x+%d runs past its segment %+v", uint64(b.p), b.size, sg)
				}
				want := uint64(0)
				if c.owned {
					want = b.s.ID()
				}
				if sg.Stream != want {
					t.Errorf("block %#x allocated on stream %d: segment's stream %d, want %d", uint64(b.p), b.s.ID(), sg.Stream, want)
				}
			}
			if large != 0 {
				if _, n := find(large); n != 0 {
					t.Errorf("a large allocation lies in %d segments, want none", n)
				}
			}

			// Listing allocates nothing when dst has room.
			buf := make([]mr.Segment, 0, len(segs))
			if a := testing.AllocsPerRun(100, func() { buf = res.AppendSegments(buf[:0]) }); a != 0 {
				t.Errorf("AppendSegments allocated %.0f times per call", a)
			}
			// It appends: what dst held stays in front.
			pre := []mr.Segment{{Base: 1, Size: 2, Stream: 3}}
			if got := res.AppendSegments(pre); len(got) != len(segs)+1 || got[0] != pre[0] {
				t.Errorf("AppendSegments did not append: %v", got[:min(len(got), 2)])
			}

			for _, b := range blocks {
				if err := res.Deallocate(b.p, b.size, b.s); err != nil {
					t.Fatal(err)
				}
			}
			if large != 0 {
				if err := res.Deallocate(large, c.large, s1); err != nil {
					t.Fatal(err)
				}
			}
			if err := s1.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := s2.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := res.Release(); err != nil {
				t.Fatal(err)
			}
			if got := res.AppendSegments(nil); len(got) != 0 || res.Usage().Reserved != 0 {
				t.Errorf("after freeing everything and Release: segments %v, reserved %d", got, res.Usage().Reserved)
			}
		})
	}
}
