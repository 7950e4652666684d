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
		for _, c := range poolFuzzOptions {
			runPoolModel(t, b, c.opts, c.capacity, c.grow)
		}
	}
}
