package observe_test

import (
	"go/build"
	"strings"
	"testing"
)

// Package observe holds the observer's types only, so that the core
// (redlock) imports it: it must import nothing outside the standard
// library, above all not redlock.
func TestImports_areStandardLibraryOnly(t *testing.T) {
	pkg, err := build.Import("github.com/quorumlock/quorumlock/observe", ".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.GoFiles) == 0 {
		t.Fatal("no production files found for package observe")
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("package observe imports %s; it may import the standard library only", imp)
		}
	}
}
