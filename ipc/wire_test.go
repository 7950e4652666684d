package ipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// FuzzParseFrame: any 160 bytes either parse into a frame that marshals
// back to the same bytes, or are refused with ErrProtocol; nothing panics.
func FuzzParseFrame(f *testing.F) {
	good := (&frame{kind: kindLend, id: 7, size: 4096, a: [64]byte{1, 2, 3}}).marshal()
	f.Add(good)
	f.Add(make([]byte, frameSize))
	f.Add((&frame{kind: kindHello, handle: 1, b: [64]byte{9}}).marshal())
	f.Add((&frame{kind: kindLendVirtual, id: 2, size: 2 << 20}).marshal())
	f.Add((&frame{kind: kindHello, handle: int32(gpu.HandleFabric), a: [64]byte{'S', 'A'}, b: [64]byte{9}}).marshal())
	f.Add((&frame{kind: kindHello, handle: int32(gpu.HandleNone), b: [64]byte{9}}).marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := parseFrame(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("refusal %v does not match ErrProtocol", err)
			}
			return
		}
		if got := fr.marshal(); !bytes.Equal(got, b) {
			t.Fatalf("round trip changed the frame:\n%x\n%x", b, got)
		}
	})
}

// TestParseFrameRefusals: each way a frame can be wrong.
func TestParseFrameRefusals(t *testing.T) {
	good := (&frame{kind: kindGiveBack, id: 3}).marshal()
	for _, c := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:frameSize-1] }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"kind 0", func(b []byte) []byte { b[4] = 0; return b }},
		{"kind 7", func(b []byte) []byte { b[4] = 7; return b }},
		{"padding", func(b []byte) []byte { b[13] = 1; return b }},
		{"lend of 0 bytes", func(b []byte) []byte { return lendOf(b, 0) }},
		{"lend of more bytes than an int holds", func(b []byte) []byte { return lendOf(b, 1<<63) }},
		{"virtual lend of 0 bytes", func(b []byte) []byte { return virtualLendOf(b, 0) }},
		{"virtual lend with export data", func(b []byte) []byte { b = virtualLendOf(b, 4096); b[40] = 1; return b }},
		{"virtual lend with an event handle", func(b []byte) []byte { b = virtualLendOf(b, 4096); b[159] = 1; return b }},
		{"give-back with a size", func(b []byte) []byte { b[24] = 1; return b }},
		{"give-back with export data", func(b []byte) []byte { b[32] = 1; return b }},
		{"give-back with a handle type", func(b []byte) []byte { b[8] = 1; return b }},
		{"bye with an id", func(b []byte) []byte { b[4] = byte(kindBye); return b }},
		{"hello back with an id", func(b []byte) []byte { b[4] = byte(kindHelloBack); return b }},
		{"hello with an id", func(b []byte) []byte { return helloOf(b, gpu.HandlePOSIX) }},
		{"POSIX hello with a fabric handle", func(b []byte) []byte { b = helloOf(b, gpu.HandlePOSIX); b[16] = 0; b[32] = 1; return b }},
		{"Virtual hello with a fabric handle", func(b []byte) []byte { b = helloOf(b, gpu.HandleNone); b[16] = 0; b[95] = 1; return b }},
		{"hello of two handle types", func(b []byte) []byte { b = helloOf(b, gpu.HandlePOSIX|gpu.HandleFabric); b[16] = 0; return b }},
		{"hello of an unknown handle type", func(b []byte) []byte { b = helloOf(b, 0x40); b[16] = 0; return b }},
		{"lend with an event handle", func(b []byte) []byte { b = lendOf(b, 4096); b[96] = 1; return b }},
	} {
		b := c.edit(append([]byte(nil), good...))
		if _, err := parseFrame(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", c.name, err)
		}
	}
	if _, err := parseFrame(good); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFrame(virtualLendOf(append([]byte(nil), good...), 4096)); err != nil {
		t.Fatalf("a virtual lend: %v", err)
	}
	fabric := frame{kind: kindHello, handle: int32(gpu.HandleFabric), a: [64]byte{1}, b: [64]byte{2}}
	if f, err := parseFrame(fabric.marshal()); err != nil || f != fabric {
		t.Fatalf("a fabric hello: %+v, %v; want %+v", f, err, fabric)
	}
}

// helloOf turns frame b into a hello for handle type ht.
func helloOf(b []byte, ht gpu.HandleType) []byte {
	b[4] = byte(kindHello)
	binary.LittleEndian.PutUint32(b[8:], uint32(ht))
	return b
}

// virtualLendOf turns frame b into a virtual lend of size bytes.
func virtualLendOf(b []byte, size uint64) []byte {
	b[4] = byte(kindLendVirtual)
	binary.LittleEndian.PutUint64(b[24:], size)
	return b
}

// lendOf turns frame b into a lend of size bytes.
func lendOf(b []byte, size uint64) []byte {
	b[4] = byte(kindLend)
	binary.LittleEndian.PutUint64(b[24:], size)
	return b
}
