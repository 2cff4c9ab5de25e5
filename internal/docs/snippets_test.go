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

%s)

`

// preambleImports are the packages every snippet may use without
// importing them: the library proper, which every module of this
// repository requires. A snippet using another module's package (the
// harness, integration/cluster, is a module of its own) imports it and is
// built in that module.
func preambleImports() string {
	imps := []string{"election", "fence", "pool", "redigo", "redlock", "transport"}
	out := ""
	for _, p := range imps {
		out += "\t\"github.com/quorumlock/quorumlock/" + p + "\"\n"
	}
	return out
}

const body = `
func buildReport(ctx context.Context) error { return nil }

// client is the reader's client, for the snippets that do not make one.
var client *redlock.Client

func main() {}

func snippet(ctx context.Context, t *testing.T) error {
	_, _ = ctx, t
`

// unused matches the compiler's complaint about a variable a snippet
// declares for the reader to use, or an import of the preamble or of the
// snippet that it does not use: not a defect of the snippet.
var unused = regexp.MustCompile(`declared and not used|imported and not used`)

// importBlock is a snippet's own import block, as a reader copies it.
var importBlock = regexp.MustCompile(`(?s)^\s*import\s*\((.*?)\)\s*\n`)

// importPath is one line of an import block: an optional name and a path.
var importPath = regexp.MustCompile(`^\s*(?:[A-Za-z_][A-Za-z0-9_]*\s+)?"([^"]+)"\s*$`)

// module is a Go module of this repository: its directory and go.mod.
type module struct {
	dir   string
	gomod string
}

// modules returns the repository's modules: the root first, then the
// nested ones (bench/, goredis/ ...).
func modules(t *testing.T, root string) []module {
	t.Helper()
	var ms []module
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "go.mod"))
	for _, f := range append([]string{filepath.Join(root, "go.mod")}, dirs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, module{dir: filepath.Dir(f), gomod: string(b)})
	}
	return ms
}

// mentions reports whether a go.mod names module path m as itself or a
// requirement.
func mentions(gomod, m string) bool {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == m: // a line of a require block
			return true
		case len(f) > 1 && (f[0] == "module" || f[0] == "require") && f[1] == m:
			return true
		}
	}
	return false
}

// moduleFor picks the first module that can build a snippet importing
// paths: for each import not of the standard library, the longest prefix
// of it that some go.mod names is its module, and the chosen module's
// go.mod must name it.
func moduleFor(ms []module, paths []string) (module, error) {
	var need []string
	for _, p := range paths {
		if !strings.Contains(strings.Split(p, "/")[0], ".") {
			continue // the standard library
		}
		found := ""
		for cand := p; cand != "." && cand != ""; cand = filepath.ToSlash(filepath.Dir(cand)) {
			for _, m := range ms {
				if mentions(m.gomod, cand) {
					found = cand
					break
				}
			}
			if found != "" {
				break
			}
		}
		if found == "" {
			return module{}, fmt.Errorf("no module of this repository requires %s", p)
		}
		need = append(need, found)
	}
	for _, m := range ms {
		ok := true
		for _, n := range need {
			ok = ok && mentions(m.gomod, n)
		}
		if ok {
			return m, nil
		}
	}
	return module{}, fmt.Errorf("no module of this repository requires all of %v", need)
}

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
	ms := modules(t, root)
	tmp := t.TempDir()
	type build struct {
		overlay map[string]string
		pkgs    []string
	}
	builds := map[string]*build{} // by module directory
	for i, s := range all {
		code, extra := s.code, ""
		var paths []string
		if m := importBlock.FindStringSubmatch(code); m != nil {
			code = code[len(m[0]):]
			for _, line := range strings.Split(m[1], "\n") {
				if strings.TrimSpace(line) == "" {
					continue
				}
				im := importPath.FindStringSubmatch(line)
				if im == nil {
					t.Fatalf("%s:%d: an import line the test cannot read: %q", s.file, s.line, line)
				}
				paths = append(paths, im[1])
				if !strings.Contains(preamble, `"`+im[1]+`"`) {
					extra += line + "\n"
				}
			}
		}
		mod, err := moduleFor(ms, paths)
		if err != nil {
			t.Errorf("%s:%d: %v", s.file, s.line, err)
			continue
		}
		b := builds[mod.dir]
		if b == nil {
			b = &build{overlay: map[string]string{}}
			builds[mod.dir] = b
		}
		name := fmt.Sprintf("s%d", i)
		dir := filepath.Join(mod.dir, "internal", "docsnippets", name)
		src := filepath.Join(tmp, name+".go")
		lines := strings.Count(s.code, "\n") - strings.Count(code, "\n")
		text := fmt.Sprintf(preamble, preambleImports()+dedupe(extra, preambleImports())) + body + fmt.Sprintf("//line %s:%d\n", filepath.Join(root, s.file), s.line+lines) + code + "\treturn nil\n}\n"
		if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		b.overlay[filepath.Join(dir, "main.go")] = src
		b.pkgs = append(b.pkgs, "./internal/docsnippets/"+name)
	}
	for dir, b := range builds {
		ov, _ := json.Marshal(map[string]any{"Replace": b.overlay})
		ovPath := filepath.Join(tmp, filepath.Base(dir)+"-overlay.json")
		if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
			t.Fatal(err)
		}
		build := func() ([]byte, error) {
			cmd := exec.Command("go", append([]string{"build", "-o", os.DevNull, "-gcflags=-e", "-overlay", ovPath}, b.pkgs...)...)
			cmd.Dir = dir
			return cmd.CombinedOutput()
		}
		out, err := build()
		if err != nil && onlyDownloads(out) {
			// The module's dependencies were fetched by this build (a
			// fresh machine) and it said nothing else: build once more.
			out, err = build()
		}
		if err == nil {
			t.Logf("%s: %d snippets compile", dir, len(b.pkgs))
			continue
		}
		var bad []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// "go: downloading" lines are the go command fetching the
			// module's dependencies (a fresh module cache), not errors.
			if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "go: downloading ") || unused.MatchString(line) {
				continue
			}
			bad = append(bad, line)
		}
		if len(bad) > 0 {
			t.Errorf("snippets in the docs do not compile (in the module at %s):\n%s", dir, strings.Join(bad, "\n"))
		}
	}
}

// dedupe drops from extra the import lines already in have.
func dedupe(extra, have string) string {
	out := ""
	for _, line := range strings.Split(extra, "\n") {
		if im := importPath.FindStringSubmatch(line); im != nil && strings.Contains(have, `"`+im[1]+`"`) {
			continue
		}
		if strings.TrimSpace(line) != "" {
			out += line + "\n"
		}
	}
	return out
}

// onlyDownloads reports whether every line of a go command's output says
// that it downloads a module.
func onlyDownloads(out []byte) bool {
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.HasPrefix(line, "go: downloading ") {
			return false
		}
	}
	return true
}
