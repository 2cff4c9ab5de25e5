package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// buildProxy writes a module proxy in the file layout the go command reads
// with GOPROXY=file://dir (<module>/@v/list, <version>.info, .mod, .zip)
// holding version of every published module, each made from its tag in the
// git repository at root, as a public proxy would make it.
func buildProxy(root, version, dir string) error {
	mods, err := readModules(root)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if !m.Published {
			continue
		}
		tag := m.tagPrefix() + version
		if err := proxyModule(root, m, tag, version, dir); err != nil {
			return fmt.Errorf("proxy: %s@%s: %w", m.Path, version, err)
		}
	}
	return nil
}

func proxyModule(root string, m goModule, tag, version, dir string) error {
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	commitTime, err := git(root, "log", "-1", "--format=%cI", tag)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(commitTime))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".info"), info, 0o644); err != nil {
		return err
	}
	gomod := "go.mod"
	if m.Dir != "." {
		gomod = m.Dir + "/go.mod"
	}
	mod, err := git(root, "show", tag+":"+gomod)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".mod"), []byte(mod), 0o644); err != nil {
		return err
	}
	zf, err := os.Create(filepath.Join(vdir, version+".zip"))
	if err != nil {
		return err
	}
	subdir := ""
	if m.Dir != "." {
		subdir = m.Dir
	}
	if err := zip.CreateFromVCS(zf, module.Version{Path: m.Path, Version: version}, root, tag, subdir); err != nil {
		zf.Close()
		return err
	}
	if err := zf.Close(); err != nil {
		return err
	}
	list := filepath.Join(vdir, "list")
	old, _ := os.ReadFile(list)
	return os.WriteFile(list, append(old, []byte(version+"\n")...), 0o644)
}
