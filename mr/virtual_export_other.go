//go:build !unix

package mr

import (
	"fmt"
	"os"

	"github.com/streamalloc/streamalloc/gpu"
)

// dupFile is not available here: each export asks the driver.
func dupFile(f *os.File) (*os.File, error) {
	return nil, fmt.Errorf("duplicate a descriptor: %w", gpu.ErrNotSupported)
}
