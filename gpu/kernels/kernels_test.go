// Tests of the built-in kernels on the backend STREAMALLOC_DEVICE selects:
// the simulator's Go versions by default, the PTX on the GPU script's run.

package kernels_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFillCheckSpin(t *testing.T) {
	dev := testdev.Device(t)
	k, err := kernels.Load(dev)
	ok(t, err)
	if k2, err := kernels.Load(dev); err != nil || k2 != k {
		t.Fatalf("second Load: %v, %v", k2 == k, err)
	}
	s, err := dev.NewStream()
	ok(t, err)
	defer s.Destroy()

	for _, words := range []int{1, 255, 256, 257, 1<<20 + 1} {
		const seed = 0xFFFFFFF0 // wraps around: word i is seed+i mod 2^32
		p, err := dev.MallocAsync(4*words, s)
		ok(t, err)
		cnt, err := dev.MallocAsync(4, s)
		ok(t, err)
		ok(t, dev.MemsetD8Async(cnt, 0, 4, s))
		ok(t, k.Fill(s, p, words, seed))
		host := make([]byte, 4*words)
		ok(t, dev.CopyDtoHAsync(host, p, s))
		ok(t, s.Synchronize())
		for i := range words {
			if got := binary.LittleEndian.Uint32(host[4*i:]); got != seed+uint32(i) {
				t.Fatalf("%d words: word %d = %#x, want %#x", words, i, got, seed+uint32(i))
			}
		}
		// Plant mismatches at the first and last word.
		planted := map[int]bool{0: true, words - 1: true}
		for i := range planted {
			ok(t, dev.MemsetD8Async(p+gpu.DevicePtr(4*i+1), 0x77, 1, s))
		}
		ok(t, k.Check(s, p, words, seed, cnt))
		var c [4]byte
		ok(t, dev.CopyDtoHAsync(c[:], cnt, s))
		ok(t, s.Synchronize())
		if got := binary.LittleEndian.Uint32(c[:]); got != uint32(len(planted)) {
			t.Errorf("%d words: check counted %d, want %d", words, got, len(planted))
		}
		ok(t, dev.FreeAsync(p, s))
		ok(t, dev.FreeAsync(cnt, s))
	}

	// Spin holds the stream.
	start := time.Now()
	ok(t, k.Spin(s, 100*time.Millisecond))
	if err := s.Query(); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("Query during a spin: %v, want ErrNotReady", err)
	}
	ok(t, s.Synchronize())
	if el := time.Since(start); el < 95*time.Millisecond {
		t.Errorf("100ms spin ended after %v", el)
	}
	ok(t, s.Query())
}

func TestBadInput(t *testing.T) {
	dev := testdev.Device(t)
	if _, err := kernels.Load(nil); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("Load(nil): %v", err)
	}
	k, err := kernels.Load(dev)
	ok(t, err)
	s, err := dev.NewStream()
	ok(t, err)
	defer s.Destroy()
	if err := k.Fill(s, 0, -1, 0); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("Fill(-1): %v", err)
	}
	if err := k.Check(s, 0, -1, 0, 0); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("Check(-1): %v", err)
	}
	if err := k.Spin(s, -time.Second); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("Spin(-1s): %v", err)
	}
	// Zero words launch nothing and succeed.
	ok(t, k.Fill(s, 0, 0, 0))
	ok(t, k.Check(s, 0, 0, 0, 0))
	// A destroyed stream is refused by the backend.
	dead, err := dev.NewStream()
	ok(t, err)
	ok(t, dead.Destroy())
	if err := k.Spin(dead, time.Millisecond); !errors.Is(err, gpu.ErrDestroyed) {
		t.Errorf("Spin on a destroyed stream: %v", err)
	}
	ok(t, s.Synchronize())
}
