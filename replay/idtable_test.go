package replay

import (
	"encoding/binary"
	"maps"
	"testing"
)

// checkTable compares t with the reference m: every key of m is held with
// its value, the counts agree, and each visits exactly m.
func checkTable(t *testing.T, tb *idTable[int64], m map[uint64]int64) {
	t.Helper()
	if tb.len() != len(m) {
		t.Fatalf("len = %d, want %d", tb.len(), len(m))
	}
	for k, want := range m {
		if v, ok := tb.get(k); !ok || v != want {
			t.Fatalf("get(%#x) = %d, %v; want %d, true", k, v, ok, want)
		}
	}
	seen := make(map[uint64]int64)
	tb.each(func(k uint64, v int64) {
		if _, dup := seen[k]; dup {
			t.Fatalf("each visits %#x twice", k)
		}
		seen[k] = v
	})
	if !maps.Equal(seen, m) {
		t.Fatalf("each visits %v, want %v", seen, m)
	}
}

func TestIDTable(t *testing.T) {
	// Keys that collide under the hash's top bits (multiples of a large
	// power of two), the free-slot marker itself, and zero.
	tests := []struct {
		name string
		keys []uint64
	}{
		{"empty", nil},
		{"zero and the marker", []uint64{0, emptyKey, 1}},
		{"aligned addresses", func() []uint64 {
			var ks []uint64
			for i := uint64(0); i < 1000; i++ {
				ks = append(ks, 0x7f0000000000+i<<21)
			}
			return ks
		}()},
		{"dense", func() []uint64 {
			var ks []uint64
			for i := uint64(0); i < 5000; i++ {
				ks = append(ks, i)
			}
			return ks
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tb idTable[int64]
			m := make(map[uint64]int64)
			for i, k := range tt.keys {
				tb.put(k, int64(i))
				m[k] = int64(i)
			}
			checkTable(t, &tb, m)
			if _, ok := tb.get(12345678901); ok {
				t.Fatal("get of a key never put reports it held")
			}
			// The slots are the fewest (a power of two, 16 at least) that
			// keep the keys at 3/4 of them.
			want := 0
			if n := len(m) - btoi(hasKey(m, emptyKey)); n > 0 {
				want = 16
				for 4*n > 3*want {
					want *= 2
				}
			}
			if len(tb.slots) != want {
				t.Fatalf("%d slots for %d keys, want %d", len(tb.slots), len(m), want)
			}
			// Delete every other key, then the rest: each probe run
			// must stay reachable after the shifts.
			for i, k := range tt.keys {
				if i%2 == 0 {
					tb.delete(k)
					delete(m, k)
				}
			}
			checkTable(t, &tb, m)
			for _, k := range tt.keys {
				tb.delete(k)
				delete(m, k)
			}
			checkTable(t, &tb, m)
		})
	}
}

func TestIDTableRef(t *testing.T) {
	var tb idTable[int64]
	if tb.ref(7) != nil || tb.ref(emptyKey) != nil {
		t.Fatal("ref on an empty table is not nil")
	}
	tb.put(7, 1)
	tb.put(emptyKey, 2)
	*tb.ref(7) += 10
	*tb.ref(emptyKey) += 20
	checkTable(t, &tb, map[uint64]int64{7: 11, emptyKey: 22})
	tb.delete(8) // not held: nothing changes
	tb.delete(emptyKey)
	checkTable(t, &tb, map[uint64]int64{7: 11})
}

// FuzzIDTable runs a sequence of puts and deletes against a map. Each
// operation is 3 bytes: an op and a key drawn from a small range (so that
// keys repeat and probe runs collide) scaled to spread like addresses.
func FuzzIDTable(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 2, 0, 1, 1, 0, 0, 255, 255})
	f.Add([]byte{0, 0, 1, 0, 0, 2, 0, 0, 3, 1, 0, 1, 1, 0, 2, 0, 0, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var tb idTable[int64]
		m := make(map[uint64]int64)
		for i := 0; i+3 <= len(ops); i += 3 {
			k := uint64(binary.LittleEndian.Uint16(ops[i+1:]))
			switch {
			case k == 0xffff:
				k = emptyKey
			case k&1 == 1:
				k <<= 40 // the same home for many keys
			}
			if ops[i]%3 == 2 {
				tb.delete(k)
				delete(m, k)
				continue
			}
			tb.put(k, int64(i))
			m[k] = int64(i)
		}
		checkTable(t, &tb, m)
	})
}

func hasKey(m map[uint64]int64, k uint64) bool { _, ok := m[k]; return ok }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestBlockAt(t *testing.T) {
	tests := []struct {
		seq    uint64
		stream uint32
	}{{1, 0}, {5_000_000, 9_999}, {maxSeq, maxStreams - 1}, {1 << 39, 1 << 23}}
	for _, tt := range tests {
		b := block{at: tt.seq<<streamBits | uint64(tt.stream)}
		if b.seq() != tt.seq || b.stream() != tt.stream {
			t.Errorf("block of seq %d on stream %d reads seq %d, stream %d", tt.seq, tt.stream, b.seq(), b.stream())
		}
	}
}
