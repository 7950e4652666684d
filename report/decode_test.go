package report

// A reader of pages and containers for the tests: the inverse of
// container.go and of the page's data elements, written from the layout
// the package documents (not from the encoder), so that a test of the
// decoded data checks what the page's script would read.

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
)

// decoded is one container: its header as generic JSON and as the
// header type, and its columns as plain integers.
type decoded struct {
	raw    map[string]any
	header traceHeader
	cols   map[string][]int64
}

var dataRE = regexp.MustCompile(`<script type="application/octet-stream" id="(sa-data-\d+)">([^<]*)</script>`)

// pageData returns the containers of a page by element id.
func pageData(page string) (map[string]*decoded, error) {
	out := map[string]*decoded{}
	for _, m := range dataRE.FindAllStringSubmatch(page, -1) {
		d, err := decodeContainer(m[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m[1], err)
		}
		out[m[1]] = d
	}
	return out, nil
}

func decodeContainer(text string) (*decoded, error) {
	z, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	if len(raw) < 8 || string(raw[:4]) != "SAV1" {
		return nil, fmt.Errorf("no magic")
	}
	n := int(binary.LittleEndian.Uint32(raw[4:]))
	if 8+n > len(raw) {
		return nil, fmt.Errorf("header of %d bytes in %d", n, len(raw))
	}
	d := &decoded{cols: map[string][]int64{}}
	if err := json.Unmarshal(raw[8:8+n], &d.raw); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw[8:8+n], &d.header); err != nil {
		return nil, err
	}
	start := (8 + n + 7) &^ 7
	sizes := map[string]int{"u8": 1, "i8": 1, "u16": 2, "i16": 2, "u32": 4, "i32": 4, "f64": 8}
	for name, c := range d.header.Columns {
		size, ok := sizes[c.Type]
		if !ok {
			return nil, fmt.Errorf("column %s: type %q", name, c.Type)
		}
		off := start + c.Off
		if c.Off%8 != 0 || off+c.Len*size > len(raw) {
			return nil, fmt.Errorf("column %s: %d values at %d in %d bytes", name, c.Len, off, len(raw))
		}
		vals := make([]int64, c.Len)
		var acc int64
		for i := range vals {
			b := raw[off+i*size:]
			var v int64
			switch c.Type {
			case "u8":
				v = int64(b[0])
			case "i8":
				v = int64(int8(b[0]))
			case "u16":
				v = int64(binary.LittleEndian.Uint16(b))
			case "i16":
				v = int64(int16(binary.LittleEndian.Uint16(b)))
			case "u32":
				v = int64(binary.LittleEndian.Uint32(b))
			case "i32":
				v = int64(int32(binary.LittleEndian.Uint32(b)))
			case "f64":
				f := math.Float64frombits(binary.LittleEndian.Uint64(b))
				if f != math.Trunc(f) {
					return nil, fmt.Errorf("column %s: %v is not an integer", name, f)
				}
				v = int64(f)
			}
			if c.Delta {
				acc += v
				v = acc
			}
			if c.Array == "i32" && (v < math.MinInt32 || v > math.MaxInt32) {
				return nil, fmt.Errorf("column %s: %d in an i32 array", name, v)
			}
			vals[i] = v
		}
		d.cols[name] = vals
	}
	return d, nil
}
