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
//     than the behaviour it checks;
//   - a test waits for a condition with a bound, not with time.Sleep
//     (docs/testing.md, "Shared checks"): a time.Sleep of a test file is
//     a poll's or a pace's interval (the last statement of the body of
//     the innermost for or range statement of its own function, or that
//     for statement's post statement), or says "the subject: ..." in a
//     comment on its line or on a comment-only line directly above, where
//     time passing is the point; the few that wait for what nothing shows
//     are listed, one entry a call, each with why (sleepsAllowed).
//
// The check reads the source only (go/parser): a function starts Redis if
// it calls a starter, directly or through functions of its own package
// (or of a package it imports) that do. A method call is matched by name
// within the caller's package, which can only over-report.
package testrules_test

import (
	"bufio"
	"fmt"
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

// goFiles returns the Go files under root (testdata, hidden directories
// and build outputs excluded) and the module path of each directory
// (relative to root, slash-separated) that holds a go.mod.
func goFiles(t *testing.T, root string) (files []string, modules map[string]string) {
	t.Helper()
	modules = map[string]string{}
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
	return files, modules
}

// read parses every Go file under root (see goFiles) and returns its
// functions and their calls.
func read(t *testing.T, root string) *tree {
	t.Helper()
	files, modules := goFiles(t, root)
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

// subjectLabel says, in a comment on a time.Sleep's line or on a line
// of only that comment directly above, that the sleep's subject is time
// passing.
const subjectLabel = "the subject:"

// sleepsAllowed are the time.Sleep calls of tests that wait for a
// condition which nothing shows without a change to the code under test,
// each with why: the file, the top-level function the call is in and its
// argument as written, which together name exactly one call.
var sleepsAllowed = []allowedSleep{
	{"goredis/hung_masters_redis_test.go", "TestTryAcquire_firstRoundOnNewlyHungMastersFailsAtTheTimeout", "20 * time.Millisecond",
		"the warm-up's last answers (its Release returns at a quorum) are read before two masters stop, so that the timed round is the first to meet them hung, none known down yet; nothing outside the client shows an answer read"},
	{"goredis/lane_redis_test.go", "TestLane_sentLateBehindASlowBatch", "25 * time.Millisecond",
		"the side's script must reach the master while the lane's script runs, and a master running a script answers nobody; where it did not, the test fails rather than passing unchecked"},
	{"goredis/late_grant_validity_redis_test.go", "TestLateGrant_readThroughTheWaitDoesNotOverstateValidity", "2 * time.Millisecond",
		"the first busy scripts must be running on each master before the lanes' PINGs reach it, so that each PING waits behind one; a master running a script answers nobody, and this process shows only that the EVAL was sent; the test counts the rounds where the case occurred, and fails where none did"},
	{"goredis/late_grant_validity_redis_test.go", "TestLateGrant_readThroughTheWaitDoesNotOverstateValidity", "15 * time.Millisecond",
		"the second busy scripts must reach each master behind the lanes' PING, while the first script runs, which answers nobody; the test counts the rounds where the case occurred, and fails where none did"},
	{"redlock/extend_validity_redis_test.go", "TestLockExtend_lateAnswerSettlesInFlight", "200 * time.Millisecond",
		"the client reads the late PEXPIRE answers the proxy lets through; nothing outside the lock shows they were read"},
	{"redlock/lead_passed_over_internal_redis_test.go", "TestWake_leadPassedOverBeforeItsNotice", "100 * time.Millisecond",
		"every woken attempt over and no wake-up pending: two notices may merge into one wake-up, and the waiter's pending state is not shown"},
	{"redlock/lead_stopped_masters_internal_redis_test.go", "TestLead_attemptCancelledWhileLeadStopped", "100 * time.Millisecond",
		"the SET's bytes reach the stopped lead's socket; nothing shows that while the process is stopped"},
	{"redlock/lead_stopped_masters_internal_redis_test.go", "TestLead_closeDuringLedRound", "100 * time.Millisecond",
		"the SET's bytes reach the stopped lead's socket; nothing shows that while the process is stopped"},
	{"redlock/mux_hostile_redis_test.go", "TestHostile_droppedConnectionIsResentInOrder", "300 * time.Millisecond",
		"the big command's write must block on the fake master's full socket before the release is sent, so that the release stays queued behind the write; every master's connection writes the same 16 MiB command, and nothing shows which write is the one that blocks"},
	{"redlock/mux_noscript_close_redis_test.go", "TestNoScript_fallbackDoesNotOvertakeTheRollback", "100 * time.Millisecond",
		"the rollback's bytes reach the frozen master's socket; nothing shows that while the process is stopped"},
	{"redlock/order_redis_test.go", "TestReentrant_lateRollbackKeepsNextAttempt", "50 * time.Millisecond",
		"attempt 2's command reaches the stopped master's socket; nothing shows that while the process is stopped"},
	{"redlock/readown_split_reply_redis_test.go", "TestReadOwn_splitReplyCancelEndsTheWait", "100 * time.Millisecond",
		"the caller takes the reply's first byte inside the guarded connection, which shows nothing of it; a cancel before it is handled too, so the sleep only makes the split case likely"},
	{"redlock/recheck_after_notice_internal_redis_test.go", "TestSemaphore_newWaiterTakesASlotFreedBeforeItRegistered", "200 * time.Millisecond",
		"slot B's notices must reach the waiter before its first pause polls its subscriptions; the waiter's pending wake-up is not shown, and a late notice only lets the test pass unchecked"},
	{"redlock/recheck_after_notice_internal_redis_test.go", "TestWait_newWaiterRechecksAfterItsWokenAttemptIsRefusedByThePilot", "200 * time.Millisecond",
		"the release's notices must reach the waiter before its first pause polls its subscriptions; the waiter's pending wake-up is not shown, and a late notice only lets the test pass unchecked"},
	{"redlock/release_late_grant_redis_test.go", "TestRelease_nilMeansOthersCanTakeItAfterAMasterStoppedMidAcquisition", "100 * time.Millisecond",
		"the release's command reaches the stopped master's socket before it resumes; nothing shows that while the process is stopped"},
	{"redlock/wake_multikey_absorb_redis_test.go", "releaseInWindow", "300 * time.Millisecond",
		"every master's notice reaches the client; nothing counts notices received, and a settled pause shows only the first retry"},
}

// allowedSleep names a time.Sleep call that waits for what nothing shows:
// its file, the top-level function it is in, its argument as written, and
// why it stays.
type allowedSleep struct{ file, fn, arg, why string }

// sleep is a time.Sleep call in a test file.
type sleep struct {
	file string // relative to the root, slash-separated
	line int
	fn   string // the top-level function it is in ("" outside one)
	arg  string // its argument, as written
}

// fixedSleeps parses every _test.go file under root (see goFiles) and
// returns its time.Sleep calls that are neither a loop's interval (see
// loopInterval) nor labelled with subjectLabel in a comment on their line
// or on a comment-only line directly above (a trailing comment of the
// line above labels nothing).
func fixedSleeps(t *testing.T, root string) []sleep {
	t.Helper()
	files, _ := goFiles(t, root)
	var out []sleep
	fset := token.NewFileSet()
	for _, p := range files {
		if !strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), "Sleep(") {
			continue // most files: no parse, no comments to keep
		}
		f, err := parser.ParseFile(fset, p, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		timeName := ""
		for _, is := range f.Imports {
			if ip, _ := strconv.Unquote(is.Path.Value); ip == "time" {
				timeName = "time"
				if is.Name != nil {
					timeName = is.Name.Name
				}
			}
		}
		if timeName == "" || timeName == "_" {
			continue
		}
		labelled := map[int]bool{} // lines a comment with the label is on
		whole := map[int]bool{}    // lines that are only such a comment
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if !strings.Contains(c.Text, subjectLabel) {
					continue
				}
				start, end := fset.Position(c.Pos()), fset.Position(c.End())
				for l := start.Line; l <= end.Line; l++ {
					labelled[l] = true
				}
				if blankBefore(src, start.Offset) && blankAfter(src, end.Offset) {
					for l := start.Line; l <= end.Line; l++ {
						whole[l] = true
					}
				}
			}
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		for _, d := range f.Decls {
			fn := ""
			if fd, ok := d.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
			}
			var stack []ast.Node
			ast.Inspect(d, func(n ast.Node) bool {
				if n == nil {
					stack = stack[:len(stack)-1]
					return true
				}
				stack = append(stack, n)
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) != 1 || !isSelector(call.Fun, timeName, "Sleep") {
					return true
				}
				line := fset.Position(call.Pos()).Line
				if labelled[line] || whole[line-1] || loopInterval(stack[:len(stack)-1], call) {
					return true
				}
				arg := call.Args[0]
				out = append(out, sleep{file: rel, line: line, fn: fn,
					arg: string(src[fset.Position(arg.Pos()).Offset:fset.Position(arg.End()).Offset])})
				return true
			})
		}
	}
	return out
}

// isSelector reports whether e is x.sel.
func isSelector(e ast.Expr, x, sel string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != sel {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == x
}

// loopInterval reports whether call, with the nodes around it (the
// outermost first), is a poll's or a pace's interval: the whole of a
// statement that is the last of the body of the innermost for or range
// statement of its own function (no function literal or declaration
// between them), or that for statement's post statement. A sleep
// elsewhere in a loop's body waits, mid-iteration, for something.
func loopInterval(around []ast.Node, call *ast.CallExpr) bool {
	if len(around) < 3 {
		return false
	}
	stmt, ok := around[len(around)-1].(*ast.ExprStmt)
	if !ok || stmt.X != call {
		return false
	}
	switch parent := around[len(around)-2].(type) {
	case *ast.ForStmt:
		return parent.Post == ast.Stmt(stmt)
	case *ast.BlockStmt:
		var body *ast.BlockStmt
		switch loop := around[len(around)-3].(type) {
		case *ast.ForStmt:
			body = loop.Body
		case *ast.RangeStmt:
			body = loop.Body
		}
		return body == parent && parent.List[len(parent.List)-1] == ast.Stmt(stmt)
	}
	return false
}

// blankBefore reports whether only spaces and tabs come before offset on
// its line of src.
func blankBefore(src []byte, offset int) bool {
	for i := offset - 1; i >= 0 && src[i] != '\n'; i-- {
		if src[i] != ' ' && src[i] != '\t' {
			return false
		}
	}
	return true
}

// blankAfter reports whether only spaces, tabs and a carriage return come
// after offset on its line of src.
func blankAfter(src []byte, offset int) bool {
	for i := offset; i < len(src) && src[i] != '\n'; i++ {
		if src[i] != ' ' && src[i] != '\t' && src[i] != '\r' {
			return false
		}
	}
	return true
}

// A test waits for a condition with a bound, not a fixed time: a
// time.Sleep of a test file is a loop's interval, labelled "the subject:
// ..." where time passing is the point, or allowed (sleepsAllowed, one
// entry a call).
func TestWaits_sleepOnlyWhereTimeIsTheSubject(t *testing.T) {
	for _, p := range sleepProblems(fixedSleeps(t, findRoot(t)), sleepsAllowed) {
		t.Error(p)
	}
}

// sleepProblems reports each of found that allowed does not name, and
// each entry of allowed that names no call or more than one.
func sleepProblems(found []sleep, allowed []allowedSleep) []string {
	var out []string
	used := make([]int, len(allowed))
	for _, s := range found {
		ok := false
		for i, a := range allowed {
			if a.file == s.file && a.fn == s.fn && a.arg == s.arg {
				ok = true
				used[i]++
			}
		}
		if !ok {
			out = append(out, fmt.Sprintf(`%s:%d: time.Sleep waits for a fixed time: wait for the condition with a bound, or say "the subject: ..." where time passing is the point (docs/testing.md, "Shared checks")`,
				s.file, s.line))
		}
	}
	for i, a := range allowed {
		switch {
		case used[i] == 0:
			out = append(out, fmt.Sprintf("%s: no unlabelled time.Sleep(%s) in %s, which sleepsAllowed lists: remove the entry", a.file, a.arg, a.fn))
		case used[i] > 1:
			out = append(out, fmt.Sprintf("%s: the sleepsAllowed entry for time.Sleep(%s) in %s matches %d calls: an entry names one call, so label, mend or tell apart the others", a.file, a.arg, a.fn, used[i]))
		}
	}
	return out
}

// An entry of sleepsAllowed names one call: one that matches two calls
// is reported, as are one that matches none and a call none names.
func TestWaits_allowedEntryNamesOneCall(t *testing.T) {
	found := []sleep{
		{file: "a_test.go", line: 10, fn: "TestA", arg: "time.Second"},
		{file: "a_test.go", line: 20, fn: "TestA", arg: "time.Second"},
		{file: "a_test.go", line: 30, fn: "TestA", arg: "time.Minute"},
		{file: "b_test.go", line: 5, fn: "TestB", arg: "time.Second"},
	}
	allowed := []allowedSleep{
		{"a_test.go", "TestA", "time.Second", "twice"},
		{"a_test.go", "TestA", "time.Minute", "once"},
		{"a_test.go", "TestA", "time.Hour", "never"},
	}
	got := sleepProblems(found, allowed)
	want := []string{"b_test.go:5: time.Sleep waits", "time.Sleep(time.Second) in TestA matches 2 calls", "no unlabelled time.Sleep(time.Hour) in TestA"}
	if len(got) != len(want) {
		t.Fatalf("reported %q, want %d reports", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("report %d: %q, want it to say %q", i, got[i], w)
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

// The sleep rule finds what it is for, in the planted tree: each
// time.Sleep of testdata/planted/sleeps_test.go marked "// flagged" (a bare
// one, one below a line whose trailing comment has the label, one in an
// if statement inside a loop, one in a loop's body before another
// statement, one in a function literal inside a loop) and no other (one
// labelled on its line, one labelled on a comment-only line above, the
// last statement of a for and of a range statement's body, a for
// statement's post statement).
func TestWaits_checkFindsPlantedSleeps(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "planted", "sleeps_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, line := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(line, "// flagged") {
			want = append(want, "sleeps_test.go:"+strconv.Itoa(i+1))
		}
	}
	var got []string
	for _, s := range fixedSleeps(t, plantedTree(t)) {
		got = append(got, s.file+":"+strconv.Itoa(s.line))
	}
	if len(want) != 5 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("flagged %v, want %v (five)", got, want)
	}
}
