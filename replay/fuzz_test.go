package replay

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

// model is the reference the fuzz test checks Run against: the replay's
// rules (package comment) written as plainly as possible, over a resource
// that has capacity bytes, rounds to 256 and never gives back.
type model struct {
	capacity        uint64
	live, failed    map[uint64]int64 // trace address -> size
	used, traceLive uint64
	streams         map[uint64]bool
	want            counts
}

func (m *model) alloc(addr uint64, size int64, stream uint64) {
	m.want.allocs++
	m.streams[stream] = true
	if old, ok := m.live[addr]; ok {
		m.want.dups++
		m.traceLive -= uint64(old)
		m.used -= round(int(old))
		delete(m.live, addr)
	} else if old, ok := m.failed[addr]; ok {
		m.want.dups++
		m.traceLive -= uint64(old)
		delete(m.failed, addr)
	}
	m.traceLive += uint64(size)
	m.want.peakLive = max(m.want.peakLive, m.traceLive)
	if size > 0 && m.used+round(int(size)) > m.capacity {
		m.want.failures++
		m.failed[addr] = size
		return
	}
	m.live[addr] = size
	m.used += round(int(size))
	m.want.peakReserved = max(m.want.peakReserved, m.used)
}

func (m *model) free(addr uint64, stream uint64) {
	m.want.frees++
	if size, ok := m.live[addr]; ok {
		m.streams[stream] = true
		m.traceLive -= uint64(size)
		m.used -= round(int(size))
		delete(m.live, addr)
	} else if size, ok := m.failed[addr]; ok {
		m.traceLive -= uint64(size)
		delete(m.failed, addr)
	} else {
		m.want.unknown++
	}
}

// FuzzRun replays arbitrary sequences of allocations, frees and trace
// failures over few addresses, streams and sizes (so that duplicates,
// unknown frees and out-of-memory all happen) and checks every count
// against the model, and that nothing is left in the resource or the
// device afterwards.
func FuzzRun(f *testing.F) {
	f.Add([]byte{0, 1, 4, 1, 1, 0, 3, 2, 200, 1, 2, 0, 2, 0, 9})
	f.Add([]byte{0, 0, 255, 0, 1, 255, 1, 0, 0, 0, 2, 1, 4, 2, 0, 1, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &model{capacity: 16 << 10, live: map[uint64]int64{}, failed: map[uint64]int64{}, streams: map[uint64]bool{}}
		var b strings.Builder
		b.WriteString(trace.Header + "\n")
		for i := 0; i+2 < len(data); i += 3 {
			op, addr, size, stream := data[i]%3, uint64(data[i+1]%8)<<8|0x7f00, int64(data[i+2])*64, uint64(data[i]/3%3)
			m.want.events++
			switch op {
			case 0:
				m.alloc(addr, size, stream)
				fmt.Fprintf(&b, "1,0,allocate,%#x,%d,%#x\n", addr, size, stream)
			case 1:
				m.free(addr, stream)
				fmt.Fprintf(&b, "1,0,free,%#x,%d,%#x\n", addr, size, stream)
			case 2:
				m.want.traceFailures++
				fmt.Fprintf(&b, "1,0,allocate failure,0x0,%d,%#x\n", size, stream)
			}
		}
		m.want.atEnd = int64(len(m.live))
		m.want.streams = len(m.streams)

		dev := &fakeDevice{}
		res := newFakeResource(dev, m.capacity)
		r, err := Run(context.Background(), trace.NewCSVReader(strings.NewReader(b.String()), "fuzz"), dev, res, Options{})
		if err != nil {
			t.Fatalf("%v\n%s", err, b.String())
		}
		if got := countsOf(r); got != m.want {
			t.Fatalf("got  %+v\nwant %+v\n%s", got, m.want, b.String())
		}
		if len(res.live) != 0 {
			t.Errorf("%d blocks left in the resource", len(res.live))
		}
		if err := dev.allDown(); err != nil {
			t.Error(err)
		}
	})
}
