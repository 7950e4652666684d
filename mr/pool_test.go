package mr_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrtest"
)

func newPool(tb testing.TB, upstream mr.Resource, opts mr.PoolOptions) *mr.Pool {
	tb.Helper()
	p, err := mr.NewPool(upstream, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestPoolConformance(t *testing.T) {
	dev := testdev.Device(t)
	for _, tc := range []struct {
		name string
		opts mr.PoolOptions
	}{
		{"default", mr.PoolOptions{}},
		{"small-chunks-max", mr.PoolOptions{ChunkSize: 4 << 20, MaxSize: 256 << 20}},
		{"initial-threshold", mr.PoolOptions{InitialSize: 64 << 20, ReleaseThreshold: 16 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
				return newPool(tb, mr.NewDirect(dev), tc.opts)
			}, dev, mrtest.Options{DetectsDoubleFree: true})
		})
	}
}
