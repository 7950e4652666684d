package mr

import (
	"math/rand/v2"
	"testing"
)

// TestPoolModelRandom runs the fuzz test's model on random sequences, so
// that plain `go test` covers more than the seed corpus.
func TestPoolModelRandom(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 40
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range n {
		b := make([]byte, 1+r.IntN(900))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		runPoolModel(t, b, PoolOptions{}, 4<<30)
		runPoolModel(t, b, PoolOptions{MaxSize: 96 << 20, ChunkSize: 8 << 20}, 1<<30)
		runPoolModel(t, b, PoolOptions{ReleaseThreshold: 4 << 20, InitialSize: 10 << 20}, 1<<30)
		runPoolModel(t, b, PoolOptions{SplitBig: true, ChunkSize: 8 << 20, MaxSize: 160 << 20}, 1<<30)
	}
}
