// Package patchcheck checks that the mutants of a list (patches kept
// beside the tests that must kill them) still apply to the code: a
// mutant that no longer applies is not run, and a move of the code it
// patches would otherwise go unnoticed until the next mutant run. It
// serves the sim and integration modules' tests.
package patchcheck

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// EveryPatchApplies fails t for each dir/*.patch of which no version
// (the patch, or one of its other versions, m.*.diff) applies with
// `git apply --check -p1` in root. It skips t where git is not installed.
func EveryPatchApplies(t testing.TB, dir, root string) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	patches, err := filepath.Glob(filepath.Join(dir, "*.patch"))
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutants found in %s: %v", dir, err)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range patches {
		versions, _ := filepath.Glob(p[:len(p)-len(".patch")] + ".*.diff")
		var out []byte
		applies := false
		for _, v := range append([]string{p}, versions...) {
			abs, _ := filepath.Abs(v)
			cmd := exec.Command(git, "apply", "--check", "-p1", abs)
			cmd.Dir = root
			if out, err = cmd.CombinedOutput(); err == nil {
				applies = true
				break
			}
		}
		if !applies {
			t.Errorf("mutant %s applies to no version of the code: %s", filepath.Base(p), out)
		}
	}
}
