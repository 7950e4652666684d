package streamalloc_test

// TestReadme runs the README's first two code blocks as a new user would,
// on this checkout (in CI a fresh clone): every shell command of them,
// and the Go program of the library snippet.
//
// How each command runs:
//   - through sh -c in the repository's root, so globs expand as in a
//     shell; each file a command names (after expansion) must be tracked
//     by git, so that a command cannot pass here on a file a fresh clone
//     lacks;
//   - a go test command runs with -run '^$' added: it compiles and links
//     every package's tests, which is all that can fail short of a test,
//     and runs none of them (the tests are the rest of this suite, and
//     running them from here would recurse into this test). In a fresh
//     clone that links every test binary once (about a minute on two
//     cores); after that the go command's cache answers in a second;
//   - a command that needs a GPU (--device cuda, STREAMALLOC_DEVICE=cuda,
//     the GPU scripts) is skipped: CI has none;
//   - each command has five minutes.
//
// The Go snippet must be gofmt-clean, and is run with go run: it compiles
// as written and works on the simulated GPU.
//
// Skipped with -short.

import (
	"bytes"
	"context"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// codeBlock is a fenced block of the README.
type codeBlock struct {
	lang string
	text string
	line int // the line of its opening fence
}

func fencedBlocks(md string) []codeBlock {
	var out []codeBlock
	var cur *codeBlock
	for i, l := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &codeBlock{lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 1}
		case cur != nil && strings.HasPrefix(l, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	return out
}

// shellCommands returns the commands of a shell block: each non-empty
// line, without its trailing comment (two spaces and a #).
func shellCommands(text string) []string {
	var out []string
	comment := regexp.MustCompile(`\s{2,}#.*$`)
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(comment.ReplaceAllString(l, ""))
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func needsGPU(cmd string) bool {
	return strings.Contains(cmd, "--device cuda") || strings.Contains(cmd, "STREAMALLOC_DEVICE=cuda") ||
		strings.HasPrefix(cmd, "scripts/gpu-") || strings.HasPrefix(cmd, ".gpubin/")
}

// asRun is the command as the test runs it: go test gets -run '^$'.
func asRun(cmd string) string {
	if rest, ok := strings.CutPrefix(cmd, "go test "); ok && !strings.Contains(rest, "-run") {
		return "go test -run '^$' " + rest
	}
	return cmd
}

// untracked returns the files that cmd names (globs expanded) and git
// does not track.
func untracked(t *testing.T, git, cmd string) []string {
	var out []string
	for _, tok := range strings.Fields(cmd) {
		if strings.HasPrefix(tok, "-") || strings.HasPrefix(tok, "./") || !strings.Contains(tok, "/") {
			continue
		}
		matches, err := filepath.Glob(strings.Trim(tok, `'"`))
		if err != nil || len(matches) == 0 {
			continue // not a file (a pattern of another kind); the command says if it is missing
		}
		for _, m := range matches {
			if err := exec.Command(git, "ls-files", "--error-unmatch", m).Run(); err != nil {
				out = append(out, m)
			}
		}
	}
	return out
}

func TestReadme(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's commands (go run and go test builds)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(string(md))
	if len(blocks) < 2 {
		t.Fatalf("README has %d code blocks, want at least 2", len(blocks))
	}
	blocks = blocks[:2]

	// The first block shows the product: the replay of the bundled traces,
	// then the test command CI runs.
	first := shellCommands(blocks[0].text)
	if blocks[0].lang != "sh" || len(first) < 2 ||
		!strings.HasPrefix(first[0], "go run ./cmd/streamalloc replay replay/testdata/") || first[1] != "go test -race ./..." {
		t.Fatalf("the README's first block must start with the replay of the bundled traces and go test -race ./...; it is %q:\n%s",
			blocks[0].lang, blocks[0].text)
	}
	git, gitErr := exec.LookPath("git")
	if gitErr == nil {
		if err := exec.Command(git, "rev-parse", "--git-dir").Run(); err != nil {
			gitErr = err
		}
	}

	// What some commands must print, besides exiting 0.
	wants := map[string][]string{
		"go run ./cmd/streamalloc replay": {"torch-train-gpt-b.csv.gz", "peak reserved", "fragmentation"},
		"go run ./cmd/streamalloc info":   {"devices:", "next: "},
	}
	for _, b := range blocks {
		switch b.lang {
		case "sh", "bash", "shell":
			for _, cmd := range shellCommands(b.text) {
				t.Run(cmd, func(t *testing.T) {
					if needsGPU(cmd) {
						t.Skip("needs a GPU")
					}
					if gitErr == nil {
						if u := untracked(t, git, cmd); len(u) > 0 {
							t.Errorf("names files a fresh clone lacks (not tracked by git): %v", u)
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					c := exec.CommandContext(ctx, "sh", "-c", asRun(cmd))
					out, err := c.CombinedOutput()
					if err != nil {
						t.Fatalf("README line %d: %s: %v\n%s", b.line, asRun(cmd), err, out)
					}
					for prefix, ws := range wants {
						if strings.HasPrefix(cmd, prefix) {
							for _, w := range ws {
								if !bytes.Contains(out, []byte(w)) {
									t.Errorf("output lacks %q:\n%s", w, out)
								}
							}
						}
					}
				})
			}
		case "go":
			t.Run("library snippet", func(t *testing.T) {
				src := []byte(b.text)
				if f, err := format.Source(src); err != nil || !bytes.Equal(f, src) {
					t.Errorf("the snippet at README line %d is not gofmt-clean (%v)", b.line, err)
				}
				dir := t.TempDir()
				file := filepath.Join(dir, "main.go")
				if err := os.WriteFile(file, src, 0o644); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, goTool, "run", file).CombinedOutput()
				if err != nil {
					t.Fatalf("go run of the snippet at README line %d: %v\n%s", b.line, err, out)
				}
				if !bytes.Contains(out, []byte("streamalloc memory summary")) {
					t.Errorf("the snippet printed no summary:\n%s", out)
				}
			})
		default:
			t.Errorf("README block at line %d is %q; the first two blocks are shell commands and the Go snippet", b.line, b.lang)
		}
	}
}

func TestReadmeParsing(t *testing.T) {
	blocks := fencedBlocks("text\n```sh\ngo run ./x   # the main job\n\n# a comment line\nls -l 'a  #b'\n```\n\n```go\npackage main\n```\n")
	if len(blocks) != 2 || blocks[0].lang != "sh" || blocks[0].line != 2 || blocks[1].lang != "go" || blocks[1].text != "package main\n" {
		t.Fatalf("blocks %+v", blocks)
	}
	if got := shellCommands(blocks[0].text); len(got) != 2 || got[0] != "go run ./x" || got[1] != "ls -l 'a" {
		// A comment is two spaces and a #, even inside quotes: the
		// README's commands are written so that this holds.
		t.Errorf("commands %q", got)
	}
	for _, c := range []struct {
		cmd, run string
		gpu      bool
	}{
		{"go test -race ./...", "go test -run '^$' -race ./...", false},
		{"go test -run Foo ./mr", "go test -run Foo ./mr", false},
		{"go run ./cmd/streamalloc info --device cuda", "go run ./cmd/streamalloc info --device cuda", true},
		{"scripts/gpu-test.sh", "scripts/gpu-test.sh", true},
		{"STREAMALLOC_DEVICE=cuda go test ./mr", "STREAMALLOC_DEVICE=cuda go test ./mr", true},
	} {
		if got := asRun(c.cmd); got != c.run {
			t.Errorf("asRun(%q) = %q, want %q", c.cmd, got, c.run)
		}
		if got := needsGPU(c.cmd); got != c.gpu {
			t.Errorf("needsGPU(%q) = %v", c.cmd, got)
		}
	}
}
