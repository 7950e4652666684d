package mr_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/mr"
)

// TestPoolReleaseDestroyedHome: a chunk whose home stream was destroyed
// while it held a block freed on another stream is still released (the
// home can wait on nothing, so the pool synchronizes instead), and nothing
// stays reserved.
func TestPoolReleaseDestroyedHome(t *testing.T) {
	dev := poolSimDevice(t)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{})
	home, _ := dev.NewStream()
	other, _ := dev.NewStream()
	defer other.Destroy()
	const n = 1 << 20
	a, err := p.Allocate(n, home)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Allocate(n, home)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(a, n, home); err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(b, n, other); err != nil { // pending on home's list
		t.Fatal(err)
	}
	if err := home.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(); err != nil {
		t.Fatalf("Release with a destroyed home stream: %v", err)
	}
	if u := p.Usage(); u.Reserved != 0 || u.Used != 0 {
		t.Fatalf("after Release: %+v, want nothing reserved", u)
	}
}
