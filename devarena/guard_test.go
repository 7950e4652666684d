package devarena

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// poison is the byte that fills every block the guarded resource hands
// out, and a guard area after it: bytes a test finds still poisoned were
// written by no one.
const (
	poison    = 0xA5
	guardSize = 4096
)

var errInjected = errors.New("injected failure")

// guarded is a test resource over the device's stream-ordered allocator:
// each block is guardSize bytes longer than asked, and the whole of it is
// poisoned in stream order before the caller can use it, so a test can
// check what a kernel wrote inside the block and that nothing was written
// past it.
type guarded struct {
	dev gpu.Device

	mu       sync.Mutex
	live     map[gpu.DevicePtr]int
	failFree int // fail this many Deallocates
}

func newGuarded(dev gpu.Device) *guarded {
	return &guarded{dev: dev, live: make(map[gpu.DevicePtr]int)}
}

func (g *guarded) Device() gpu.Device { return g.dev }

func (g *guarded) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if size < 0 {
		return 0, fmt.Errorf("guarded: %w", mr.ErrInvalidSize)
	}
	if size == 0 {
		return 0, nil
	}
	p, err := g.dev.MallocAsync(size+guardSize, s)
	if err != nil {
		return 0, err
	}
	if err := g.dev.MemsetD8Async(p, poison, size+guardSize, s); err != nil {
		return 0, errors.Join(err, g.dev.FreeAsync(p, s))
	}
	g.mu.Lock()
	g.live[p] = size
	g.mu.Unlock()
	return p, nil
}

func (g *guarded) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failFree > 0 {
		g.failFree--
		return fmt.Errorf("guarded: free: %w", errInjected)
	}
	n, ok := g.live[p]
	if !ok {
		return fmt.Errorf("guarded: free %#x: %w", p, mr.ErrUnknownPointer)
	}
	if n != size {
		return fmt.Errorf("guarded: free %#x of %d bytes, allocated %d: %w", p, size, n, mr.ErrSizeMismatch)
	}
	if err := g.dev.FreeAsync(p, s); err != nil {
		return err
	}
	delete(g.live, p)
	return nil
}

func (g *guarded) liveBlocks() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

// block returns the block that holds arena a's header and its size.
func (g *guarded) block(t testing.TB, a *Arena) (gpu.DevicePtr, int) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	n, ok := g.live[a.Header()]
	if !ok {
		t.Fatalf("arena header %#x is not a live block of the resource", a.Header())
	}
	return a.Header(), n
}

// readBack copies n bytes at p to the host, in order on s, and waits.
func readBack(t testing.TB, dev gpu.Device, s gpu.Stream, p gpu.DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := dev.CopyDtoHAsync(b, p, s); err != nil {
		t.Fatalf("copy %d bytes from %#x: %v", n, p, err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("synchronize: %v", err)
	}
	return b
}

// checkOutside checks that everything in a's block and its guard area but
// outside the header and the region is still poison.
func (g *guarded) checkOutside(t testing.TB, a *Arena) {
	t.Helper()
	p, n := g.block(t, a)
	b := readBack(t, g.dev, a.Stream(), p, n+guardSize)
	lo := int(a.Base() - p)
	hi := lo + a.Size()
	if i := notPoison(b[HeaderSize:lo]); i >= 0 {
		t.Errorf("byte %d between header and region written: %#x", HeaderSize+i, b[HeaderSize+i])
	}
	if i := notPoison(b[hi:]); i >= 0 {
		t.Errorf("byte %d past the region's end (%d bytes past) written: %#x", hi+i, i, b[hi+i])
	}
}

// notPoison is the index of the first byte of b that is not poison, or -1.
func notPoison(b []byte) int {
	for i, c := range b {
		if c != poison {
			return i
		}
	}
	return -1
}

func TestNotPoison(t *testing.T) {
	b := bytes.Repeat([]byte{poison}, 10)
	if notPoison(b) != -1 {
		t.Fatal("all poison reported written")
	}
	b[7] = 0
	if notPoison(b) != 7 {
		t.Fatal("written byte not found")
	}
}
