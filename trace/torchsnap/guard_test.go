package torchsnap

import (
	"bytes"
	"errors"
	"io"
	"math/big"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	pickle "github.com/kisielk/og-rek"

	"github.com/streamalloc/streamalloc/trace"
)

// The guard passes every pickle without a long decimal integer through
// unchanged, whatever its protocol and opcodes and however its reads are
// split, and the decoder gets the same value through it.
func TestGuardPassesPickles(t *testing.T) {
	long := new(big.Int).Exp(big.NewInt(7), big.NewInt(5000), nil) // 4226 digits
	value := map[any]any{
		"ints":   []any{int64(0), int64(255), int64(65535), int64(1 << 31), int64(-1 << 40), long, new(big.Int).Neg(long)},
		"floats": []any{1.5, -0.0, 1e300},
		"text":   []any{"", "a\nb", strings.Repeat("x", 300), pickle.Bytes("\x00\n\xff"), pickle.ByteString("bs\n")},
		"nested": pickle.Tuple{pickle.Tuple{}, pickle.Tuple{int64(1)}, pickle.Tuple{int64(1), int64(2)}, pickle.Tuple{int64(1), int64(2), int64(3)}, pickle.Tuple{int64(1), int64(2), int64(3), int64(4)}},
		"other":  []any{true, false, pickle.None{}, map[any]any{}, []any{}},
		"class":  pickle.Class{Module: "torch", Name: "Size"},
	}
	fixture, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string][]byte{"fixture": fixture}
	for proto := 0; proto <= 5; proto++ {
		var buf bytes.Buffer
		if err := pickle.NewEncoderWithConfig(&buf, &pickle.EncoderConfig{Protocol: proto}).Encode(value); err != nil {
			t.Fatalf("protocol %d: %v", proto, err)
		}
		inputs["protocol "+string(rune('0'+proto))] = buf.Bytes()
	}
	for name, data := range inputs {
		for _, split := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"byte by byte", iotest.OneByteReader}} {
			got, err := io.ReadAll(newGuard(split.wrap(bytes.NewReader(data)), name))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s, %s: %d of %d bytes, %v", name, split.name, len(got), len(data), err)
			}
		}
		want, err1 := pickle.NewDecoder(bytes.NewReader(data)).Decode()
		got, err2 := pickle.NewDecoder(newGuard(bytes.NewReader(data), name)).Decode()
		if err1 != nil || err2 != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: through the guard %v (%v), directly %v (%v)", name, got, err2, want, err1)
		}
	}
}

// The guard places a long integer where its argument begins, in any
// split of the reads, and keeps refusing.
func TestGuardRefusesLongDecimal(t *testing.T) {
	data := "\x80\x02]q\x00(K\x01L" + strings.Repeat("1", 4400) + "L\ne."
	for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
		g := newGuard(wrap(strings.NewReader(data)), "g.pickle")
		got, err := io.ReadAll(g)
		var pe *trace.ParseError
		if !errors.Is(err, trace.ErrPickle) || !errors.As(err, &pe) || pe.File != "g.pickle" ||
			!strings.Contains(err.Error(), "integer at byte 9 ") {
			t.Errorf("error %v, want ErrPickle naming byte 9", err)
		}
		if len(got) > 9+4300 {
			t.Errorf("passed %d bytes, more than the integer's first 4300 digits", len(got))
		}
		if _, err2 := g.Read(make([]byte, 1)); err2 != err {
			t.Errorf("next read: %v, want the same error", err2)
		}
	}
}
