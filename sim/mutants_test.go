package sim

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMutants_everyPatchApplies checks that each mutant of
// sim/mutants (or one of its other versions, m.*.diff) still applies to
// the library as it is: a mutant that no longer applies is not run by
// `make mutants`, and a move of the code it patches would otherwise go
// unnoticed until then.
func TestMutants_everyPatchApplies(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	patches, err := filepath.Glob(filepath.Join("mutants", "*.patch"))
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutants found: %v", err)
	}
	root, err := filepath.Abs("..")
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
