// Package docs_test checks that the Go snippets in README.md and docs/*.md
// compile against the current API. (Their behaviour is covered by the
// runnable examples of each package, which pkg.go.dev shows.)
package docs_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// snippet is one ```go block of a Markdown file.
type snippet struct {
	file string
	line int
	code string
}

func snippets(t *testing.T, root string) []snippet {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	var out []snippet
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *snippet
		for i, line := range strings.Split(string(b), "\n") {
			switch {
			case cur == nil && strings.TrimSpace(line) == "```go":
				rel, _ := filepath.Rel(root, f)
				cur = &snippet{file: rel, line: i + 2}
			case cur != nil && strings.TrimSpace(line) == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.code += line + "\n"
			}
		}
		if cur != nil {
			t.Errorf("%s:%d: a ```go block that never ends", cur.file, cur.line)
		}
	}
	return out
}

// preamble is what every snippet may use: the packages a reader would
// import, a client, a context and a *testing.T, and the functions the
// snippets call as stand-ins for the reader's own work.
const preamble = `package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

var (
	_ = errors.Is
	_ = time.Second
	_ = fence.NewStore
	_ = cluster.Start
	_ = pool.New
	_ = redlock.New
)

func buildReport(ctx context.Context) error { return nil }

// client is the reader's client, for the snippets that do not make one.
var client *redlock.Client

func main() {}

func snippet(ctx context.Context, t *testing.T) error {
	_, _ = ctx, t
`

// unused matches the compiler's complaint about a variable a snippet
// declares for the reader to use: not a defect of the snippet.
var unused = regexp.MustCompile(`declared and not used`)

func TestSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the snippets with the go command")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	all := snippets(t, root)
	if len(all) == 0 {
		t.Fatal("no ```go snippets found: the test reads the wrong place")
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	where := map[string]snippet{}
	for i, s := range all {
		dir := filepath.Join(root, "internal", "docs", "snippets", fmt.Sprintf("s%d", i))
		src := filepath.Join(tmp, fmt.Sprintf("s%d.go", i))
		code := preamble + fmt.Sprintf("//line %s:%d\n", filepath.Join(root, s.file), s.line) + s.code + "\treturn nil\n}\n"
		if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(dir, "main.go")] = src
		pkgs = append(pkgs, "./internal/docs/snippets/"+filepath.Base(dir))
		where[filepath.Base(dir)] = s
	}
	ov, _ := json.Marshal(map[string]any{"Replace": overlay})
	ovPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-o", os.DevNull, "-gcflags=-e", "-overlay", ovPath}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Logf("%d snippets compile", len(all))
		return
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || strings.HasPrefix(line, "#") || unused.MatchString(line) {
			continue
		}
		bad = append(bad, line)
	}
	if len(bad) > 0 {
		t.Errorf("snippets in the docs do not compile:\n%s", strings.Join(bad, "\n"))
	}
}
