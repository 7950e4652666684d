package mr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/mr"
)

func TestAlignedAlignments(t *testing.T) {
	up := newRecording()
	s := up.stream()
	a, err := mr.NewAligned(up, 4096)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		align, size int
		wantUpSize  int
	}{
		{1, 100, 100},
		{256, 100, 100},
		{512, 100, 356},
		{4096, 1, 3841},
		{1 << 20, 5000, 5000 + 1<<20 - 256},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d/%d", tc.align, tc.size), func(t *testing.T) {
			// Misalign the upstream's next block so alignment has work to do.
			if _, err := up.Allocate(256, s); err != nil {
				t.Fatal(err)
			}
			n := up.numCalls()
			p, err := a.AllocateAligned(tc.size, tc.align, s)
			if err != nil {
				t.Fatal(err)
			}
			want := max(tc.align, mr.Alignment)
			if int(p)%want != 0 {
				t.Fatalf("%#x not aligned to %d", p, want)
			}
			c := up.Calls()[n]
			if c.Size != tc.wantUpSize || p < c.Ptr || int(p-c.Ptr)+tc.size > c.Size {
				t.Fatalf("upstream block %#x+%d does not hold %#x+%d", c.Ptr, c.Size, p, tc.size)
			}
			if err := a.Deallocate(p, tc.size, s); err != nil {
				t.Fatal(err)
			}
			f := up.Calls()[n+1]
			if f.Op != "deallocate" || f.Ptr != c.Ptr || f.Size != c.Size || f.Err != nil {
				t.Fatalf("upstream free %+v, want the block %#x+%d", f, c.Ptr, c.Size)
			}
		})
	}
	// Allocate uses the adaptor's alignment.
	p, err := a.Allocate(10, s)
	if err != nil || p%4096 != 0 || a.Alignment() != 4096 {
		t.Fatalf("Allocate = %#x, %v", p, err)
	}
	a.Deallocate(p, 10, s)
}

func TestAlignedBadAlignment(t *testing.T) {
	up := newRecording()
	s := up.stream()
	a, _ := mr.NewAligned(up, 512)
	for _, al := range []int{0, -256, 3, 768, mr.MaxAlignment * 2, 1 << 62} {
		_, err := mr.NewAligned(up, al)
		var ae *mr.AlignmentError
		if !errors.Is(err, mr.ErrInvalidAlignment) || !errors.As(err, &ae) || ae.Alignment != al {
			t.Errorf("NewAligned(%d) = %v", al, err)
		}
		if _, err := a.AllocateAligned(64, al, s); !errors.Is(err, mr.ErrInvalidAlignment) {
			t.Errorf("AllocateAligned(64, %d) = %v", al, err)
		}
	}
	if up.numCalls() != 0 {
		t.Fatal("bad alignments reached the upstream")
	}
	// A size whose padding overflows is out of memory, not a panic.
	if _, err := a.AllocateAligned(int(^uint(0)>>1), 1<<20, s); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("huge aligned request: %v", err)
	}
	if up.numCalls() != 0 {
		t.Fatal("an impossible request reached the upstream")
	}
}
