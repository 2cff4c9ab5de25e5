package jitter

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
)

// A client given a seeded source (withJitter) draws the same backoffs,
// semaphore slots and tokens from the same seed; without one, tokens come
// from crypto/rand and never repeat.
func TestJitter_seededSourceRepeatsItsDraws(t *testing.T) {
	draw := func(j *Rand) (out []any) {
		for a := range 8 {
			out = append(out, Backoff(j, time.Millisecond, time.Second, a))
		}
		out = append(out, j.IntN(5), j.N(time.Millisecond), j.UUID(), j.UUID())
		return out
	}
	a := draw(New(rand.NewPCG(1, 2)))
	b := draw(New(rand.NewPCG(1, 2)))
	c := draw(New(rand.NewPCG(1, 3)))
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("draw %d: %v, then %v from the same seed", i, a[i], b[i])
		}
	}
	if a[len(a)-1] == c[len(c)-1] {
		t.Errorf("token %v from two seeds", a[len(a)-1])
	}
	for _, tok := range []any{a[len(a)-2], a[len(a)-1]} {
		u, err := uuid.Parse(tok.(string))
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
			t.Errorf("token %v: want a version-4 UUID (%v)", tok, err)
		}
	}
	var nilJit *Rand
	if x, y := nilJit.UUID(), nilJit.UUID(); x == y {
		t.Errorf("unseeded tokens repeat: %q", x)
	}
	for a := range 40 {
		floor, ceiling := time.Millisecond, 100*time.Millisecond
		d := min(ceiling, floor<<min(a, 30))
		if got := Backoff(nilJit, floor, ceiling, a); got < d/2 || got > d {
			t.Errorf("Backoff(attempt %d) = %v, want in [%v, %v]", a, got, d/2, d)
		}
	}
}
