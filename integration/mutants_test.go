package integration_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/patchcheck"
)

// TestClockMutants_everyPatchApplies checks that each mutant of the
// clock suite (testdata/mutants, `make mutants-clock`) still applies to
// the library as it is: one named a file the code had moved out of, and
// only the next mutant run found it.
func TestClockMutants_everyPatchApplies(t *testing.T) {
	patchcheck.EveryPatchApplies(t, "testdata/mutants", "..")
}
