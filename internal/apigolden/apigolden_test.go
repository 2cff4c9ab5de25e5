package apigolden

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden API files in api/ from the packages")

// published are the packages a release publishes, relative to the
// repository root, with the golden file each is compared with. A package
// that is added to a published module goes here too.
var published = []struct{ dir, golden string }{
	{"redlock", "redlock.txt"},
	{"observe", "observe.txt"},
	{"pool", "pool.txt"},
	{"layout", "layout.txt"},
	{"fence", "fence.txt"},
	{"election", "election.txt"},
	{"clock", "clock.txt"},
	{"redigo", "redigo.txt"},
	{"transport", "transport.txt"},
	{"goredis", "goredis.txt"},
	{"rueidis", "rueidis.txt"},
	{"valkey", "valkey.txt"},
	{"otel", "otel.txt"},
}

// TestPublicAPIMatchesGolden fails when a published package's exported API
// differs from its golden file in api/: a change to the API is made
// deliberately, by running
//
//	go test ./internal/apigolden -update
//
// and committing the changed golden file with the change.
func TestPublicAPIMatchesGolden(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, p := range published {
		t.Run(p.dir, func(t *testing.T) {
			lines, err := List(filepath.Join(root, p.dir))
			if err != nil {
				t.Fatal(err)
			}
			names, deprecated := Count(lines)
			got := "# " + p.dir + ": " + strconv.Itoa(names) + " names (top-level declarations and methods of exported types), " +
				strconv.Itoa(deprecated) + " of them deprecated\n" +
				strings.Join(lines, "\n") + "\n"
			path := filepath.Join(root, "api", p.golden)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/apigolden -update to write it)", err)
			}
			if string(want) != got {
				t.Errorf("the exported API of %s differs from %s:\n%s\nIf the change is deliberate, run go test ./internal/apigolden -update and commit the golden file.",
					p.dir, path, diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")))
			}
		})
	}
}

func TestListShowsSignaturesFieldsAndMethods(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// T is a type.
type T struct {
	A int // a comment
	b string
	U
}

type U interface {
	M(x int) error
	m()
}

type u struct{}

func (T) Get() int            { return 0 }
func (*T) Set(v int)          {}
func (u) Hidden()             {}
func New(n int) (*T, error)   { return nil, nil }
func internal()               {}

const C = 1
var V, w = 1, 2

// Old is old.
//
// Deprecated: use New.
func Old() {}

type A = T
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\nfunc Exported() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"const C",
		"field T, embedded U",
		"field T.A int",
		"func New(n int) (*T, error)",
		"func Old()" + Deprecated,
		"imethod U, unexported methods",
		"imethod U.M(x int) error",
		"method (*T) Set(v int)",
		"method (T) Get() int",
		"type A = T",
		"type T struct",
		"type U interface",
		"var V",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("List:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if n, d := Count(lines); n != 9 || d != 1 {
		t.Errorf("Count = %d, %d, want 9, 1", n, d)
	}
}

// diff lists the lines only in want (-) and only in got (+).
func diff(want, got []string) string {
	in := func(l []string) map[string]bool {
		m := make(map[string]bool, len(l))
		for _, s := range l {
			m[s] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, s := range want {
		if !g[s] {
			b.WriteString("- " + s + "\n")
		}
	}
	for _, s := range got {
		if !w[s] {
			b.WriteString("+ " + s + "\n")
		}
	}
	return b.String()
}
