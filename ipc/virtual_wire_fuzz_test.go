//go:build unix

package ipc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/ipc"
)

// FuzzRecvVirtual feeds RecvVirtual arbitrary bytes (no descriptors can
// come with them): it never panics, refuses with ErrProtocol or a lost
// peer, and what it accepts holds only fabric pieces, in order, inside
// the span, and goes back through SendVirtual to the same export.
func FuzzRecvVirtual(f *testing.F) {
	good := make([]byte, 40+84)
	copy(good, "SAVIRT01")
	binary.LittleEndian.PutUint64(good[8:], 4<<20)
	binary.LittleEndian.PutUint64(good[16:], 1<<20)
	binary.LittleEndian.PutUint64(good[24:], 2<<20)
	binary.LittleEndian.PutUint64(good[32:], 1)
	binary.LittleEndian.PutUint64(good[40+8:], 4<<20)
	binary.LittleEndian.PutUint32(good[40+16:], uint32(gpu.HandleFabric))
	f.Add(good)
	f.Add(good[:40])
	f.Add([]byte("SAVIRT01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := socketPair(t)
		defer a.Close()
		defer b.Close()
		go func() {
			a.Write(in)
			a.CloseWrite()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		x, err := ipc.RecvVirtual(ctx, b)
		if err != nil {
			if !errors.Is(err, ipc.ErrProtocol) && !errors.Is(err, ipc.ErrPeerLost) {
				t.Fatalf("RecvVirtual: %v, want ErrProtocol or ErrPeerLost", err)
			}
			return
		}
		var end uint64
		for i, pc := range x.Pieces {
			if pc.Handle.Type != gpu.HandleFabric || pc.Handle.File != nil {
				t.Fatalf("piece %d: %+v, from bytes without descriptors", i, pc.Handle)
			}
			if pc.Offset < end || pc.Offset+pc.Size > x.Span || pc.Size == 0 {
				t.Fatalf("piece %d at [%d, +%d) after %d in a span of %d", i, pc.Offset, pc.Size, end, x.Span)
			}
			end = pc.Offset + pc.Size
		}
		if x.Size == 0 || x.Start+x.Size > x.Span {
			t.Fatalf("range [%d, +%d) in a span of %d", x.Start, x.Size, x.Span)
		}
		c, d := socketPair(t)
		defer c.Close()
		defer d.Close()
		sent := make(chan error, 1)
		go func() { sent <- ipc.SendVirtual(ctx, c, x) }()
		y, err := ipc.RecvVirtual(ctx, d)
		if err != nil || <-sent != nil {
			t.Fatalf("round trip of an accepted export: %v", err)
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("round trip: %+v, then %+v", x, y)
		}
	})
}
