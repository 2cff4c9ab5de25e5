// Package testrules_test checks the naming rules of the repository's tests
// (docs/testing.md, "Tiers, names"), across every module:
//
//   - a test file whose tests start real Redis (a redis-server process or
//     container, through internal/redistest, integration/cluster,
//     examples/internal/throwaway, a helper that runs redis-server by
//     name, or a helper of its own package that calls them) is named
//     *_redis_test.go, so that the tier a file
//     belongs to shows in its name;
//   - no test function is named after an attack round or a review rather
//     than the behaviour it checks.
//
// The check reads the source only (go/parser): a function starts Redis if
// it calls a starter, directly or through functions of its own package
// (or of a package it imports) that do. A method call is matched by name
// within the caller's package, which can only over-report.
package testrules_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rootModule is the module path of the repository's root.
const rootModule = "github.com/quorumlock/quorumlock"

// starters are the functions that start real Redis, by import path below
// the root module and name.
var starters = []string{
	"internal/redistest.Start",
	"internal/redistest.StartOne",
	"internal/redistest.Launch",
	"internal/redistest.LaunchServers",
	"internal/redistest.OutsideTest",
	"integration/cluster.Start",
	"integration/cluster.Launch",
	"integration/cluster.StartRedisClusters",
	"examples/internal/throwaway.Masters",
}

// roundName matches test functions named for when they were written, or
// for the infrastructure they run on (TestRedis_) rather than the unit.
var roundName = regexp.MustCompile(`^(Test|Benchmark|Fuzz)([A-Za-z0-9]*_)?(Attack|Review|Round[0-9])|Attack[0-9]|^TestRedis_`)

// testName matches the functions go test runs.
var testName = regexp.MustCompile(`^(Test|Benchmark|Example|Fuzz)([A-Z_0-9]|$)`)

// ref is a call: of a function (method false) or of a method by name.
type ref struct {
	pkg, name string
	method    bool
}

func (r ref) key() string {
	if r.method {
		return r.pkg + ".#" + r.name
	}
	return r.pkg + "." + r.name
}

// decl is one function declaration and what it calls.
type decl struct {
	key   string
	file  string // relative to the root
	name  string
	test  bool // a top-level Test, Benchmark, Example or Fuzz function of a _test.go file
	calls []ref
}

// tree is what the check reads of a repository.
type tree struct {
	decls []*decl
}

// findRoot walks up from the working directory to the root module's go.mod.
func findRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if modulePath(filepath.Join(dir, "go.mod")) == rootModule {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatalf("no go.mod of %s above the working directory", rootModule)
		}
		dir = up
	}
}

// modulePath is the module line of a go.mod file, or "".
func modulePath(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// skippedDir reports whether the checks leave out a directory named name:
// test data, vendored code, build outputs, hidden and underscored ones.
func skippedDir(name string) bool {
	return name == "testdata" || name == "vendor" || name == "bin" ||
		strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// read parses every Go file under root (testdata, hidden directories and
// build outputs excluded) and returns its functions and their calls.
func read(t *testing.T, root string) *tree {
	t.Helper()
	modules := map[string]string{} // directory (relative) -> module path
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && skippedDir(name) {
				return filepath.SkipDir
			}
			if m := modulePath(filepath.Join(p, "go.mod")); m != "" {
				rel, _ := filepath.Rel(root, p)
				modules[filepath.ToSlash(rel)] = m
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	importPath := func(relDir string) string {
		for d := relDir; ; d = path.Dir(d) {
			if m, ok := modules[d]; ok {
				if d == "." {
					if relDir == "." {
						return m
					}
					return m + "/" + relDir
				}
				return m + strings.TrimPrefix(relDir, d)
			}
			if d == "." {
				return relDir
			}
		}
	}
	tr := &tree{}
	fset := token.NewFileSet()
	for _, p := range files {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		pkg := importPath(path.Dir(rel))
		imports := map[string]string{}
		for _, is := range f.Imports {
			ip, _ := strconv.Unquote(is.Path.Value)
			name := path.Base(ip)
			if is.Name != nil {
				name = is.Name.Name
			}
			imports[name] = ip
		}
		isTestFile := strings.HasSuffix(rel, "_test.go")
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			dc := &decl{file: rel, name: fd.Name.Name}
			if fd.Recv == nil {
				dc.key = ref{pkg: pkg, name: fd.Name.Name}.key()
				dc.test = isTestFile && fd.Name.Name != "TestMain" &&
					testName.MatchString(fd.Name.Name)
			} else {
				dc.key = ref{pkg: pkg, name: fd.Name.Name, method: true}.key()
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if spawnsRedis(call, imports) {
					dc.calls = append(dc.calls, ref{pkg: rootModule + "/internal/redistest", name: "Start"})
				}
				switch fn := call.Fun.(type) {
				case *ast.Ident:
					dc.calls = append(dc.calls, ref{pkg: pkg, name: fn.Name})
				case *ast.SelectorExpr:
					if x, ok := fn.X.(*ast.Ident); ok {
						if ip, ok := imports[x.Name]; ok {
							dc.calls = append(dc.calls, ref{pkg: ip, name: fn.Sel.Name})
							break
						}
					}
					dc.calls = append(dc.calls, ref{pkg: pkg, name: fn.Sel.Name, method: true})
				}
				return true
			})
			tr.decls = append(tr.decls, dc)
		}
	}
	return tr
}

// spawnsRedis reports whether call looks redis-server up or runs it by
// name (exec.LookPath, exec.Command or exec.CommandContext with the
// literal "redis-server"): a package's own starter, which counts as one.
func spawnsRedis(call *ast.CallExpr, imports map[string]string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok || imports[x.Name] != "os/exec" {
		return false
	}
	for _, a := range call.Args {
		if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING && lit.Value == `"redis-server"` {
			return true
		}
	}
	return false
}

// startsRedis returns the keys of the functions that start real Redis.
func (tr *tree) startsRedis() map[string]bool {
	starts := map[string]bool{}
	for _, s := range starters {
		starts[rootModule+"/"+s] = true
	}
	for changed := true; changed; {
		changed = false
		for _, d := range tr.decls {
			if starts[d.key] {
				continue
			}
			for _, c := range d.calls {
				if starts[c.key()] {
					starts[d.key] = true
					changed = true
					break
				}
			}
		}
	}
	return starts
}

// misnamed returns, for each test file whose tests start real Redis but
// whose name does not end in _redis_test.go, the tests that do.
func (tr *tree) misnamed() map[string][]string {
	starts := tr.startsRedis()
	out := map[string][]string{}
	for _, d := range tr.decls {
		if d.test && starts[d.key] && !strings.HasSuffix(d.file, "_redis_test.go") {
			out[d.file] = append(out[d.file], d.name)
		}
	}
	return out
}

func report(t *testing.T, bad map[string][]string) {
	t.Helper()
	files := make([]string, 0, len(bad))
	for f := range bad {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		t.Errorf("%s: %s start real Redis: name the file *_redis_test.go (docs/testing.md, \"Tiers, names\")",
			f, strings.Join(bad[f], ", "))
	}
}

// Every test file whose tests start real Redis is named *_redis_test.go.
func TestNames_filesThatStartRedisEndInRedisTest(t *testing.T) {
	report(t, read(t, findRoot(t)).misnamed())
}

// No test function is named after an attack round or a review, or
// TestRedis_ (the infrastructure, not the behaviour).
func TestNames_testsNamedForBehaviourNotRound(t *testing.T) {
	for _, d := range read(t, findRoot(t)).decls {
		if d.test && roundName.MatchString(d.name) {
			t.Errorf("%s: %s is named after when it was written or what it runs on: name it Unit_behaviour (docs/testing.md, \"Tiers, names\")",
				d.file, d.name)
		}
	}
}

// plantedTree copies testdata/planted into a temporary module of its own
// (its go.mod written here, not kept in the repository, where go mod tidy
// would ask it to require the packages its files name) and returns its
// directory.
func plantedTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("testdata", "planted")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/planted\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The check finds what it is for, in a planted tree (testdata/planted): a
// file that starts Redis through a helper of its package's other file,
// one that calls redistest directly, one that runs redis-server itself, and not the _redis_test.go file, the
// file of helpers only, or the file whose tests start nothing.
func TestNames_checkFindsPlantedFiles(t *testing.T) {
	tr := read(t, plantedTree(t))
	got := tr.misnamed()
	want := map[string][]string{
		"viahelper_test.go":  {"TestViaHelper"},
		"direct_test.go":     {"TestDirect", "ExampleDirect"},
		"ownstarter_test.go": {"TestOwnStarter"},
	}
	if len(got) != len(want) {
		t.Errorf("flagged %v, want %v", got, want)
	}
	for f, names := range want {
		if strings.Join(got[f], ",") != strings.Join(names, ",") {
			t.Errorf("%s: flagged %v, want %v", f, got[f], names)
		}
	}
	var rounds []string
	for _, d := range tr.decls {
		if d.test && roundName.MatchString(d.name) {
			rounds = append(rounds, d.name)
		}
	}
	if strings.Join(rounds, ",") != "TestAttack3_planted,TestRedis_Attack4_planted" {
		t.Errorf("named after rounds: %v, want TestAttack3_planted and TestRedis_Attack4_planted", rounds)
	}
}
