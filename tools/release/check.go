package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// notForUsers are module path prefixes that must never reach a user's
// go.sum: the integration suites' container tooling.
var notForUsers = []string{
	"github.com/docker/",
	"github.com/moby/",
	"github.com/ory/dockertest",
	"github.com/containerd/",
	"github.com/opencontainers/",
}

// checkRelease does, in a scratch clone of the repository at root (its HEAD
// plus the changes to tracked files in its work tree), what a release and
// its first users would: make release-prepare with version, a file module
// proxy from the tags it made, and then, for every published module, a new
// module outside the repository that go gets it from that proxy, tidies,
// builds and vets a small program using it (testdata/consumers/<name>), on
// the newest Go and on the oldest Go the module's go line admits. It fails
// on any failed step, on a user's go.sum that holds a container module or
// an unpublished module of this repository, and on a go.sum longer than the
// consumer's limit.
func checkRelease(root, version string, keep bool) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "quorumlock-release-check-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("scratch directory (kept):", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	repo := filepath.Join(scratch, "repo")
	if err := snapshot(root, repo); err != nil {
		return err
	}
	step("make release-prepare VERSION=" + version)
	if err := run(repo, nil, "make", "--no-print-directory", "release-prepare", "VERSION="+version); err != nil {
		return err
	}
	proxy := filepath.Join(scratch, "proxy")
	if err := buildProxy(repo, version, proxy); err != nil {
		return err
	}
	mods, err := readModules(repo)
	if err != nil {
		return err
	}
	consumers, err := filepath.Abs("testdata/consumers")
	if err != nil {
		return err
	}
	cache := strings.TrimSpace(goEnv("GOMODCACHE"))
	env := []string{
		"GOPROXY=file://" + proxy + ",file://" + filepath.Join(cache, "cache", "download") + "," + goEnv("GOPROXY"),
		"GONOSUMDB=" + mods[0].Path,
		"GOFLAGS=-mod=mod",
		"GOWORK=off",
		// A cache of its own, so that a module of this made-up version from
		// an earlier check is never taken for this one.
		"GOMODCACHE=" + filepath.Join(scratch, "modcache"),
	}
	unpublished := []string{}
	for _, m := range mods {
		if !m.Published {
			unpublished = append(unpublished, m.Path+" ")
		}
	}
	var report []string
	for _, m := range mods {
		if !m.Published {
			continue
		}
		name := "root"
		if m.Dir != "." {
			name = strings.ReplaceAll(m.Dir, "/", "-")
		}
		src := filepath.Join(consumers, name)
		if _, err := os.Stat(filepath.Join(src, "main.go")); err != nil {
			return fmt.Errorf("%s is published but has no consumer program in tools/release/testdata/consumers/%s/main.go", m.Path, name)
		}
		goLine, err := goVersion(filepath.Join(repo, m.Dir, "go.mod"))
		if err != nil {
			return err
		}
		oldest, err := newestPatch(goLine)
		if err != nil {
			return err
		}
		for _, toolchain := range []string{"", oldest} {
			label := m.Path + " on " + goEnvWith(env, toolchain, "GOVERSION")
			step(label)
			dir := filepath.Join(scratch, "consumer-"+name+"-"+strings.TrimPrefix(toolchain, "go"))
			lines, err := consume(dir, src, m.Path, version, goLine, toolchain, env)
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
			if err != nil {
				return err
			}
			for _, l := range strings.Split(string(sum), "\n") {
				for _, p := range append(notForUsers, unpublished...) {
					if strings.HasPrefix(l, p) {
						return fmt.Errorf("%s: a user's go.sum holds %q, which only this repository's tests need", label, l)
					}
				}
			}
			limit := sumLimit(src)
			if limit > 0 && lines > limit {
				return fmt.Errorf("%s: a user's go.sum has %d lines, more than the %d allowed (tools/release/testdata/consumers/%s/gosum-max)", label, lines, limit, name)
			}
			report = append(report, fmt.Sprintf("ok  %-45s go get, tidy, build, vet; go.sum %d lines", label, lines))
		}
	}
	fmt.Println()
	for _, r := range report {
		fmt.Println(r)
	}
	return nil
}

// snapshot clones the repository at root into dir and copies its work
// tree over the clone (changed, new and deleted files, leaving out what
// .gitignore ignores), committed there, so that the check sees the tree as
// it is, not only its last commit.
func snapshot(root, dir string) error {
	if err := run("", nil, "git", "clone", "-q", "--no-hardlinks", root, dir); err != nil {
		return err
	}
	for _, kv := range [][2]string{{"user.name", "release check"}, {"user.email", "release-check@localhost"}, {"commit.gpgsign", "false"}, {"tag.gpgsign", "false"}} {
		if _, err := git(dir, "config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	files, err := git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, f := range strings.Split(files, "\x00") {
		if f == "" {
			continue
		}
		src := filepath.Join(root, filepath.FromSlash(f))
		dst := filepath.Join(dir, filepath.FromSlash(f))
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		keep[f] = true
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	cloned, err := git(dir, "ls-files", "-z")
	if err != nil {
		return err
	}
	for _, f := range strings.Split(cloned, "\x00") {
		if f != "" && !keep[f] {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(f))); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	if _, err := git(dir, "add", "-A"); err != nil {
		return err
	}
	if out, _ := git(dir, "status", "--porcelain"); strings.TrimSpace(out) == "" {
		return nil
	}
	_, err = git(dir, "commit", "-q", "-m", "Work tree under check")
	return err
}

// consume makes a new module in dir around the program in src and gets,
// tidies, builds and vets it against path@version. toolchain "" is the Go
// in use; else that toolchain, with the new module's go line set to goLine.
// It returns the go.sum's line count.
func consume(dir, src, path, version, goLine, toolchain string, env []string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	prog, err := os.ReadFile(filepath.Join(src, "main.go"))
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), prog, 0o644); err != nil {
		return 0, err
	}
	if toolchain != "" {
		env = append(env[:len(env):len(env)], "GOTOOLCHAIN="+toolchain)
	} else {
		env = append(env[:len(env):len(env)], "GOTOOLCHAIN=local")
	}
	steps := [][]string{
		{"go", "mod", "init", "example.com/consumer"},
	}
	if toolchain != "" {
		steps = append(steps, []string{"go", "mod", "edit", "-go=" + goLine})
	}
	steps = append(steps,
		[]string{"go", "get", path + "@" + version},
		[]string{"go", "mod", "tidy"},
		[]string{"go", "build", "-o", os.DevNull, "./..."},
		[]string{"go", "vet", "./..."},
	)
	for _, s := range steps {
		if err := run(dir, env, s[0], s[1:]...); err != nil {
			return 0, err
		}
	}
	f, err := os.Open(filepath.Join(dir, "go.sum"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}

// sumLimit reads the consumer's go.sum limit (its gosum-max file), 0 for
// none.
func sumLimit(src string) int {
	data, err := os.ReadFile(filepath.Join(src, "gosum-max"))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return n
}

// goVersion returns the go line of the go.mod at name ("1.22").
func goVersion(name string) (string, error) {
	f, err := parseGoMod(name)
	if err != nil {
		return "", err
	}
	if f.Go == nil {
		return "", fmt.Errorf("%s has no go line", name)
	}
	return f.Go.Version, nil
}

var toolchainVersion = regexp.MustCompile(`^v0\.0\.1-go(\d+)\.(\d+)(?:\.(\d+))?\.`)

// newestPatch returns the newest release of the Go minor version that a go
// line names (go line "1.22" or "1.22.0": "go1.22.12"), as the module proxy
// serves it.
func newestPatch(goLine string) (string, error) {
	parts := strings.Split(goLine, ".")
	if len(parts) < 2 {
		return "", fmt.Errorf("go line %q: want 1.N", goLine)
	}
	out, err := exec.Command("go", "list", "-m", "-versions", "golang.org/toolchain").Output()
	if err != nil {
		return "", fmt.Errorf("listing Go toolchains on the module proxy: %w", err)
	}
	best := -1
	for _, v := range strings.Fields(string(out)) {
		m := toolchainVersion.FindStringSubmatch(v)
		if m == nil || m[1] != parts[0] || m[2] != parts[1] {
			continue
		}
		p := 0
		if m[3] != "" {
			p, _ = strconv.Atoi(m[3])
		}
		if p > best {
			best = p
		}
	}
	if best < 0 {
		return "", fmt.Errorf("the module proxy serves no toolchain go%s.x", goLine)
	}
	return fmt.Sprintf("go%s.%s.%d", parts[0], parts[1], best), nil
}

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func goEnvWith(env []string, toolchain, name string) string {
	cmd := exec.Command("go", "env", name)
	tc := "GOTOOLCHAIN=local"
	if toolchain != "" {
		tc = "GOTOOLCHAIN=" + toolchain
	}
	cmd.Env = append(append(os.Environ(), env...), tc)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		return toolchain
	}
	return strings.TrimSpace(string(out))
}

// run runs a command in dir with env added, printing it and, if it fails,
// its output.
func run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		return fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err, out.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		fmt.Printf("    %s %s: %s\n", name, strings.Join(args, " "), d.Round(100*time.Millisecond))
	}
	return nil
}

func step(s string) { fmt.Println("==", s) }
