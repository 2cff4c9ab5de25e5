// Package jitter holds a Client's random draws: the jitter of its
// backoffs and waits, and its tokens. It draws from math/rand/v2's global
// source, or from a seeded one a simulator gives so that a run's random
// delays are fixed by its seed. It knows nothing of locks, masters or
// clocks: callers pass the durations to draw from.
package jitter

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Rand draws a Client's random choices: its backoff, the spread of
// woken waiters, the retries of missed releases and the first slot a
// semaphore tries. A nil *Rand draws from math/rand/v2's global source
// (the default); a simulator seeds one (New) so that a run's random
// delays are fixed by its seed. It is safe for concurrent use.
type Rand struct {
	// mu is a leaf: callers draw under their own locks (redlock's
	// finisher.mu and waker.mu), and nothing is called while it is held.
	mu sync.Mutex
	r  *rand.Rand
}

// New returns a Rand that draws from src, or nil (the global source)
// when src is nil.
func New(src rand.Source) *Rand {
	if src == nil {
		return nil
	}
	return &Rand{r: rand.New(src)}
}

// N returns a duration in [0, d); d must be positive.
func (j *Rand) N(d time.Duration) time.Duration {
	if j == nil {
		return rand.N(d)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return time.Duration(j.r.Int64N(int64(d)))
}

// UUID returns a random UUID (version 4): a lock's token, a fair
// waiter's or a writer's id. Without a seeded source it comes from
// crypto/rand, as tokens must not be guessed.
func (j *Rand) UUID() string {
	if j == nil {
		return uuid.NewString()
	}
	var b [16]byte
	j.mu.Lock()
	binary.LittleEndian.PutUint64(b[:8], j.r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], j.r.Uint64())
	j.mu.Unlock()
	u, err := uuid.NewRandomFromReader(bytes.NewReader(b[:]))
	if err != nil { // a 16-byte reader does not fail
		return uuid.NewString()
	}
	return u.String()
}

// Uint64 returns a random uint64.
func (j *Rand) Uint64() uint64 {
	if j == nil {
		return rand.Uint64()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.r.Uint64()
}

// IntN returns an int in [0, n); n must be positive.
func (j *Rand) IntN(n int) int {
	if j == nil {
		return rand.IntN(n)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.r.IntN(n)
}

// Backoff returns the delay before retry number attempt+1: a random
// duration in [d/2, d] where d = min(ceiling, floor×2^attempt), drawn
// from j (nil: the global source).
func Backoff(j *Rand, floor, ceiling time.Duration, attempt int) time.Duration {
	d := ceiling
	if attempt < 30 {
		if e := floor << attempt; e > 0 && e < ceiling {
			d = e
		}
	}
	half := d / 2
	return half + j.N(d-half+1)
}
