//go:build unix

// Sharing a physical allocation on the GPU: a POSIX descriptor export
// imported back, and what the driver answers to misuse.

package cuda_test

import (
	"syscall"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

// TestVMMShareFD: an allocation made exportable as a POSIX descriptor is
// exported, imported back in this process, and the import mapped at a
// second address shows the same bytes. It logs (and checks only that they
// are errors) the driver's answers to the misuses that gpu/cudagpu
// refuses before the driver: exporting an allocation made without handle
// types, importing a descriptor of a file that is no export.
func TestVMMShareFD(t *testing.T) {
	dev, ctx := needGPU(t)
	if v, err := dev.Attribute(cuda.AttrHandleTypePOSIXSupported); err != nil || v == 0 {
		t.Skipf("POSIX descriptor handles: %d, %v", v, err)
	}
	fabric, ferr := dev.Attribute(cuda.AttrHandleTypeFabricSupported)
	t.Logf("CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: %d, %v", fabric, ferr)
	s := newStream(t, ctx)
	g := vmmGranule(t, dev, ctx)
	base := testdev.Must(ctx.MemAddressReserve(2*g, 0))(t)
	defer func() {
		if err := ctx.MemAddressFree(base, 2*g); err != nil {
			t.Error(err)
		}
	}()
	h := testdev.Must(ctx.MemCreateExportable(dev, g, cuda.HandlePOSIX))(t)
	if err := ctx.MemMap(base, g, 0, h); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemSetAccess(base, g, dev); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemsetD8Async(base, 0x3C, g, s); err != nil {
		t.Fatal(err)
	}
	fd := testdev.Must(ctx.MemExportFD(h))(t)
	if fd < 0 {
		t.Fatalf("MemExportFD: descriptor %d", fd)
	}
	ih, err := ctx.MemImportFD(fd)
	if cerr := syscall.Close(fd); cerr != nil {
		t.Errorf("close the exported descriptor: %v", cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exported handle %#x, imported in the same process as %#x", uint64(h), uint64(ih))
	if err := ctx.MemMap(base+cuda.DevicePtr(g), g, 0, ih); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemRelease(ih); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemSetAccess(base+cuda.DevicePtr(g), g, dev); err != nil {
		t.Fatal(err)
	}
	var last [1]byte
	if err := ctx.MemcpyDtoHAsync(last[:], base+cuda.DevicePtr(2*g-1), s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if last[0] != 0x3C {
		t.Fatalf("last byte of the import %#x, want 0x3c", last[0])
	}
	if err := ctx.MemUnmap(base, 2*g); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemRelease(h); err != nil {
		t.Fatal(err)
	}

	plain := testdev.Must(ctx.MemCreate(dev, g))(t)
	_, err = ctx.MemExportFD(plain)
	t.Logf("MemExportFD of an allocation made without handle types: %v", err)
	if err == nil {
		t.Error("the driver exported an allocation made without handle types")
	}
	if err := ctx.MemRelease(plain); err != nil {
		t.Fatal(err)
	}
	null, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(null)
	bad, err := ctx.MemImportFD(null)
	t.Logf("MemImportFD of /dev/null: %v", err)
	if err == nil {
		t.Error("the driver imported /dev/null")
		ctx.MemRelease(bad)
	}
}
