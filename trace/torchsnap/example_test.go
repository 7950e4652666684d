package torchsnap_test

import (
	"fmt"
	"io"

	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap"
)

func Example() {
	// trace.Open detects gzip and the format from the content, and reads
	// snapshots once this package is imported (above, for its side effect).
	f, err := trace.Open("testdata/snapshot-p2.pickle.gz", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	n := 0
	for {
		_, err := f.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		n++
	}
	fmt.Println(f.Format(), f.Compressed(), n, "events")
	// Output: torch-snapshot true 11 events
}
