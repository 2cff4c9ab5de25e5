package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// A goModule is one go.mod of the repository.
type goModule struct {
	Dir       string // relative to the repository's root, "." for the root
	Path      string // the module path its go.mod declares
	Published bool
}

// tagPrefix is what the module's tags start with: "" for the root module,
// "dir/" for a nested one, as the go command expects.
func (m goModule) tagPrefix() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir + "/"
}

// listFile is the list of the repository's modules, at its root.
const listFile = "modules.txt"

// readModules reads the repository's list of modules and checks it against
// the go.mod files in the tree: each go.mod must be listed, and each listed
// directory must hold one. The root module comes first.
func readModules(root string) ([]goModule, error) {
	listed, err := readList(filepath.Join(root, listFile))
	if err != nil {
		return nil, err
	}
	found, err := findGoMods(root)
	if err != nil {
		return nil, err
	}
	var mods []goModule
	var problems []string
	for _, dir := range found {
		pub, ok := listed[dir]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s/go.mod is not in %s: add it as published or unpublished", dir, listFile))
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		path := modfile.ModulePath(data)
		if path == "" {
			problems = append(problems, fmt.Sprintf("%s/go.mod declares no module path", dir))
			continue
		}
		mods = append(mods, goModule{Dir: dir, Path: path, Published: pub})
	}
	for dir := range listed {
		if !contains(found, dir) {
			problems = append(problems, fmt.Sprintf("%s lists %s, which holds no go.mod", listFile, dir))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("modules: %s", strings.Join(problems, "; "))
	}
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, fmt.Errorf("modules: no go.mod at the repository's root %s", root)
	}
	rootPath := mods[0].Path
	for _, m := range mods[1:] {
		if want := rootPath + "/" + m.Dir; m.Path != want {
			return nil, fmt.Errorf("modules: %s/go.mod declares %s, want %s (a nested module's path is its directory under the root's)", m.Dir, m.Path, want)
		}
	}
	return mods, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readList parses modules.txt: "dir published|unpublished" a line, with
// blank lines and # comments.
func readList(name string) (map[string]bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || (fields[1] != "published" && fields[1] != "unpublished") {
			return nil, fmt.Errorf("%s:%d: want a directory and published or unpublished, got %q", name, n, line)
		}
		dir := filepath.ToSlash(filepath.Clean(fields[0]))
		if _, dup := listed[dir]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice", name, n, dir)
		}
		listed[dir] = fields[1] == "published"
	}
	return listed, sc.Err()
}

// findGoMods returns the directories under root that hold a go.mod, root
// first, skipping testdata, vendor and hidden directories (which the go
// command ignores too).
func findGoMods(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool {
		if (dirs[i] == ".") != (dirs[j] == ".") {
			return dirs[i] == "."
		}
		return dirs[i] < dirs[j]
	})
	return dirs, err
}
