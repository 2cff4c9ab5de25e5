package handover

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder counts the errors Check reports instead of failing the test.
type recorder struct {
	testing.TB
	errors int
}

func (r *recorder) Errorf(string, ...any) { r.errors++ }
func (r *recorder) Helper()               {}

// Check catches a value read with another leader's term, a value that
// never won, and (ordered only) a term that goes back.
func TestCheck_wrongPairsAndBackwardTerms(t *testing.T) {
	terms := &Terms{m: map[string]uint64{"a": 1, "b": 2}}
	for _, c := range []struct {
		name          string
		reads         []Read
		ordered       bool
		bad, reported int
	}{
		{"real pairs in order", []Read{{"a", 1}, {"b", 2}}, true, 0, 0},
		{"another leader's term", []Read{{"a", 2}}, true, 1, 1},
		{"a value that never won", []Read{{"c", 3}}, false, 1, 1},
		{"terms back, ordered", []Read{{"b", 2}, {"a", 1}}, true, 0, 1},
		{"terms back, unordered", []Read{{"b", 2}, {"a", 1}}, false, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			if bad := Check(r, c.reads, terms, c.ordered); bad != c.bad || r.errors != c.reported {
				t.Errorf("Check = %d wrong pairs, %d errors; want %d, %d", bad, r.errors, c.bad, c.reported)
			}
		})
	}
}
