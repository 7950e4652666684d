package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestRunLimits: a trace with more streams or allocations than a replay
// numbers is refused with ErrTraceTooLarge at the event that passes the
// limit, and Run frees what it holds and takes its streams down. The
// limits are lowered here (streamLimit, seqLimit): the real ones need 16.7
// million streams or 2^40 allocations. A trace exactly at a limit replays.
func TestRunLimits(t *testing.T) {
	tests := []struct {
		name             string
		streams          int
		allocations      int64
		lines            []string
		wantErr          bool
		msg              string // substring of the error
		wantStreams      int    // with no error
		wantAllocations  int64
		wantFreedAtEnd   int64
		wantUnknownFrees int64
	}{
		{name: "streams at the limit", streams: 2, allocations: maxSeq,
			lines:       []string{"1,0,allocate,0x100,100,0x1", "1,0,allocate,0x200,100,0x2", "1,0,free,0x100,100,0x2"},
			wantStreams: 2, wantAllocations: 2, wantFreedAtEnd: 1},
		{name: "a new stream past the limit", streams: 2, allocations: maxSeq,
			lines:   []string{"1,0,allocate,0x100,100,0x1", "1,0,allocate,0x200,100,0x2", "1,0,allocate,0x300,100,0x3"},
			wantErr: true, msg: "t.csv:4: create a stream for trace stream 0x3: a replay numbers at most 2 streams"},
		{name: "a free on a new stream past the limit", streams: 1, allocations: maxSeq,
			lines:   []string{"1,0,allocate,0x100,100,0x1", "1,0,free,0x100,100,0x2"},
			wantErr: true, msg: "t.csv:3: create a stream for trace stream 0x2"},
		{name: "allocations at the limit", streams: maxStreams, allocations: 3,
			lines: []string{"1,0,allocate,0x100,100,0x1", "1,0,free,0x100,100,0x1", "1,0,allocate,0x100,100,0x1",
				"1,0,allocate,0x200,100,0x1", "1,0,free,0x300,100,0x1"},
			wantStreams: 1, wantAllocations: 3, wantFreedAtEnd: 2, wantUnknownFrees: 1},
		{name: "an allocation past the limit", streams: maxStreams, allocations: 3,
			lines: []string{"1,0,allocate,0x100,100,0x1", "1,0,free,0x100,100,0x1", "1,0,allocate,0x100,100,0x1",
				"1,0,allocate,0x200,100,0x1", "1,0,allocate,0x300,100,0x1"},
			wantErr: true, msg: "t.csv:6: a replay numbers at most 3 allocations"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func(s int, a int64) { streamLimit, seqLimit = s, a }(streamLimit, seqLimit)
			streamLimit, seqLimit = tc.streams, tc.allocations
			dev := &fakeDevice{}
			res := newFakeResource(dev, 1<<30)
			r, err := Run(context.Background(), csv(tc.lines...), dev, res, Options{})
			if tc.wantErr {
				if !errors.Is(err, ErrTraceTooLarge) {
					t.Fatalf("error %v, want ErrTraceTooLarge", err)
				}
				if !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("error %q does not say %q", err, tc.msg)
				}
				if r != nil {
					t.Error("a result with the error")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if r.Streams != tc.wantStreams || r.Allocations != tc.wantAllocations ||
					r.FreedAtEnd != tc.wantFreedAtEnd || r.UnknownFrees != tc.wantUnknownFrees {
					t.Errorf("streams %d, allocations %d, freed at the end %d, unknown frees %d; want %d, %d, %d, %d",
						r.Streams, r.Allocations, r.FreedAtEnd, r.UnknownFrees,
						tc.wantStreams, tc.wantAllocations, tc.wantFreedAtEnd, tc.wantUnknownFrees)
				}
			}
			if len(res.live) != 0 {
				t.Errorf("%d blocks left allocated", len(res.live))
			}
			if err := dev.allDown(); err != nil {
				t.Error(err)
			}
		})
	}
}
