package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The valkey adapter's files are what gen writes from the rueidis
// adapter's: run `go generate` in valkey/ after changing ../rueidis.
// Outside the repository (the module as the proxy serves it) there is no
// ../rueidis to compare with, and the test says so.
func TestGenerated_filesAreCurrent(t *testing.T) {
	src, dst := filepath.Join("..", "..", "..", "rueidis"), filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		t.Skipf("no rueidis adapter beside this module (%v): nothing to compare with", err)
	}
	names, err := sources(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		in, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(filepath.Join(dst, n))
		if err != nil {
			t.Errorf("%s: %v: run go generate in valkey/", n, err)
			continue
		}
		if !bytes.Equal(have, transform(n, in)) {
			t.Errorf("%s is not what gen writes from ../rueidis/%s: run go generate in valkey/", n, n)
		}
	}
	stale, err := staleFiles(dst, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range stale {
		t.Errorf("%s was generated from a file ../rueidis no longer has: run go generate in valkey/", n)
	}
}
