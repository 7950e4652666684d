// The binary container that carries one trace's data in the page.
//
// Layout, before compression:
//
//	"SAV1"                      magic
//	uint32 LE                   n, the length of the header
//	n bytes                     the header, JSON, with a "columns" directory
//	zero bytes to a multiple of 8
//	column data                 each column padded to a multiple of 8
//
// The whole is gzip-compressed and base64-encoded (standard alphabet) into
// the text of an inert script element; the page's script reverses the
// three steps with atob, DecompressionStream and DataView.
//
// Every column holds integers (event indexes, byte counts, nanoseconds,
// indexes into tables), stored in the narrowest of u8, i8, u16, i16, u32,
// i32 that holds all of its stored values, else as float64 (exact: every
// value is below 2^53 in magnitude, which the encoder checks). A column
// marked delta stores the differences between consecutive values (the
// first against 0): event indexes and times only grow, so their
// differences are small and compress well. The directory gives, per
// column, the stored type, the byte offset from the start of the column
// data, the count, whether it is delta-coded, and which array type the
// script should decode it into ("i32" when every decoded value fits an
// int32, else "f64"), so the script never guesses.

package report

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// containerMagic starts every container.
const containerMagic = "SAV1"

// maxExact is the largest magnitude a float64 column may hold exactly.
const maxExact = 1 << 53

// errColumn is a column whose values a float64 cannot hold exactly.
var errColumn = errors.New("report: column value beyond 2^53")

// column is one named column of integers.
type column struct {
	name  string
	vals  []int64
	delta bool
}

// columnEntry is a column's entry in the header's directory.
type columnEntry struct {
	Type  string `json:"type"`  // stored: u8 i8 u16 i16 u32 i32 f64
	Off   int    `json:"off"`   // from the start of the column data
	Len   int    `json:"len"`   // values
	Delta bool   `json:"delta"` // stored as differences
	Array string `json:"array"` // what the script decodes into: i32 or f64
}

// storedType is a type a column can be stored as.
type storedType struct {
	name     string
	size     int
	min, max int64
}

var storedTypes = []storedType{
	{"u8", 1, 0, math.MaxUint8},
	{"i8", 1, math.MinInt8, math.MaxInt8},
	{"u16", 2, 0, math.MaxUint16},
	{"i16", 2, math.MinInt16, math.MaxInt16},
	{"u32", 4, 0, math.MaxUint32},
	{"i32", 4, math.MinInt32, math.MaxInt32},
	{"f64", 8, -maxExact, maxExact},
}

// encodeContainer writes header (a JSON object whose "columns" field the
// encoder fills through setDir) and cols into the page's text form.
func encodeContainer(header any, setDir func(map[string]columnEntry), cols []column) (string, error) {
	dir := make(map[string]columnEntry, len(cols))
	var data bytes.Buffer
	for _, c := range cols {
		if _, dup := dir[c.name]; dup {
			return "", fmt.Errorf("report: column %q twice", c.name)
		}
		stored := c.vals
		if c.delta {
			stored = make([]int64, len(c.vals))
			prev := int64(0)
			for i, v := range c.vals {
				stored[i] = v - prev
				prev = v
			}
		}
		t, err := narrowest(stored)
		if err != nil {
			return "", fmt.Errorf("%w: column %s", err, c.name)
		}
		array := "i32"
		for _, v := range c.vals {
			if v < math.MinInt32 || v > math.MaxInt32 {
				array = "f64"
				break
			}
		}
		if array == "f64" {
			if _, err := narrowest(c.vals); err != nil {
				return "", fmt.Errorf("%w: column %s", err, c.name)
			}
		}
		dir[c.name] = columnEntry{Type: t.name, Off: data.Len(), Len: len(stored), Delta: c.delta, Array: array}
		writeValues(&data, t, stored)
		pad(&data)
	}
	setDir(dir)
	hdr, err := json.Marshal(header)
	if err != nil {
		return "", fmt.Errorf("report: header: %w", err)
	}
	var raw bytes.Buffer
	raw.WriteString(containerMagic)
	binary.Write(&raw, binary.LittleEndian, uint32(len(hdr)))
	raw.Write(hdr)
	pad(&raw)
	raw.Write(data.Bytes())

	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.DefaultCompression)
	if err != nil {
		return "", err
	}
	zw.Write(raw.Bytes()) // writes to a bytes.Buffer cannot fail
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("report: compress: %w", err)
	}
	return base64.StdEncoding.EncodeToString(z.Bytes()), nil
}

// narrowest returns the smallest stored type that holds every value.
func narrowest(vals []int64) (storedType, error) {
	lo, hi := int64(0), int64(0)
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	for _, t := range storedTypes {
		if lo >= t.min && hi <= t.max {
			return t, nil
		}
	}
	return storedType{}, errColumn
}

func writeValues(b *bytes.Buffer, t storedType, vals []int64) {
	buf := make([]byte, len(vals)*t.size)
	for i, v := range vals {
		switch t.size {
		case 1:
			buf[i] = byte(v)
		case 2:
			binary.LittleEndian.PutUint16(buf[2*i:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
		case 8:
			binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(float64(v)))
		}
	}
	b.Write(buf)
}

// pad extends b with zeros to a multiple of 8 bytes.
func pad(b *bytes.Buffer) {
	for b.Len()%8 != 0 {
		b.WriteByte(0)
	}
}
