package unpickle_test

import (
	"bytes"
	"fmt"

	"github.com/streamalloc/streamalloc/internal/unpickle"
)

func Example() {
	// One list of frames, referenced by two entries: Python's pickler
	// writes it once and references it again from its memo.
	frames := &unpickle.List{Items: []any{map[string]any{"filename": "train.py", "line": 42, "name": "forward"}}}
	entries := []any{
		map[string]any{"action": "alloc", "addr": 0x7f0000000000, "frames": frames},
		map[string]any{"action": "alloc", "addr": 0x7f0000000400, "frames": frames},
	}
	var buf bytes.Buffer
	if err := unpickle.Encode(&buf, entries, 4); err != nil {
		fmt.Println(err)
		return
	}
	v, n, err := unpickle.Decode(buf.Bytes(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	list := v.(*unpickle.List)
	first, _ := list.Items[0].(*unpickle.Dict).Get("frames")
	second, _ := list.Items[1].(*unpickle.Dict).Get("frames")
	fmt.Println(n == int64(buf.Len()), first == second, len(second.(*unpickle.List).Items))
	// Output: true true 1
}

func ExampleDecode_refused() {
	// A pickle that would call os.system: refused where GLOBAL stands,
	// before anything is imported.
	_, _, err := unpickle.Decode([]byte("cos\nsystem\n(S'echo hi'\ntR."), nil)
	fmt.Println(err)
	// Output: unpickle: refused: the pickle constructs objects or calls code: GLOBAL at byte 0: it would import a name
}
