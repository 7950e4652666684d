// The simulator must not link the driver binding: it speaks the backend
// interface's error vocabulary (gpu.Code, *gpu.Error), so a program that
// runs only on the simulator carries no cgo shim. The test walks the
// import graph of the package's non-test files through go/build, under
// every build configuration the repository uses (cgo on and off, the race
// detector's tag), following the module's own packages (nothing outside
// the module can import them back).

package sim_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/streamalloc/streamalloc"

// moduleDeps returns the module's packages that the package in dir
// imports, directly or not, with the package that first imports each.
func moduleDeps(t *testing.T, ctx build.Context, root, dir string) map[string]string {
	t.Helper()
	deps := map[string]string{}
	var visit func(importer, dir string)
	visit = func(importer, dir string) {
		p, err := ctx.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, path := range p.Imports {
			rel, ok := strings.CutPrefix(path, module+"/")
			if !ok {
				continue
			}
			if _, seen := deps[path]; seen {
				continue
			}
			deps[path] = importer
			visit(path, filepath.Join(root, filepath.FromSlash(rel)))
		}
	}
	visit(module+"/gpu/sim", dir)
	return deps
}

func TestSimDoesNotLinkTheDriverBinding(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []struct {
		name string
		cgo  bool
		tags []string
	}{
		{"cgo", true, nil},
		{"nocgo", false, nil},
		{"race", true, []string{"race"}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			ctx := build.Default
			ctx.CgoEnabled = cfg.cgo
			ctx.BuildTags = cfg.tags
			deps := moduleDeps(t, ctx, root, ".")
			if _, ok := deps[module+"/gpu"]; !ok {
				t.Fatalf("the walk did not reach package gpu (deps %v): it cannot be trusted", deps)
			}
			for _, banned := range []string{module + "/cuda", module + "/gpu/cudagpu"} {
				if by, ok := deps[banned]; ok {
					t.Errorf("gpu/sim links %s (imported by %s)", banned, by)
				}
			}
		})
	}
}
