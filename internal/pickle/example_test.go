package pickle_test

import (
	"bytes"
	"fmt"

	"github.com/streamalloc/streamalloc/internal/pickle"
)

func Example() {
	// One list of frames, referenced by two entries: Python's pickler
	// writes it once and references it again from its memo.
	frames := &pickle.List{Items: []any{map[string]any{"filename": "train.py", "line": 42, "name": "forward"}}}
	entries := []any{
		map[string]any{"action": "alloc", "addr": 0x7f0000000000, "frames": frames},
		map[string]any{"action": "alloc", "addr": 0x7f0000000400, "frames": frames},
	}
	var buf bytes.Buffer
	if err := pickle.Encode(&buf, entries, 4); err != nil {
		fmt.Println(err)
		return
	}
	v, n, err := pickle.Decode(buf.Bytes(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	list := v.(*pickle.List)
	first, _ := list.Items[0].(*pickle.Dict).Get("frames")
	second, _ := list.Items[1].(*pickle.Dict).Get("frames")
	fmt.Println(n == int64(buf.Len()), first == second, len(second.(*pickle.List).Items))
	// Output: true true 1
}

func ExampleDecode_refused() {
	// A pickle that would call os.system: refused where GLOBAL stands,
	// before anything is imported.
	_, _, err := pickle.Decode([]byte("cos\nsystem\n(S'echo hi'\ntR."), nil)
	fmt.Println(err)
	// Output: pickle: refused: the pickle constructs objects or calls code: GLOBAL at byte 0: it would import a name
}
