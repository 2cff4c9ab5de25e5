package sim

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/patchcheck"
)

// TestMutants_everyPatchApplies checks that each mutant of
// sim/mutants (or one of its other versions, m.*.diff) still applies to
// the library as it is: a mutant that no longer applies is not run by
// `make mutants`, and a move of the code it patches would otherwise go
// unnoticed until then.
func TestMutants_everyPatchApplies(t *testing.T) {
	patchcheck.EveryPatchApplies(t, "mutants", "..")
}
