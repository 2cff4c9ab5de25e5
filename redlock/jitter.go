package redlock

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
)

// jitter draws a Client's random choices: its backoff, the spread of
// woken waiters, the retries of missed releases and the first slot a
// semaphore tries. A nil *jitter draws from math/rand/v2's global source
// (the default); a simulator seeds one (withJitter) so that a run's
// random delays are fixed by its seed.
type jitter struct {
	mu sync.Mutex
	r  *rand.Rand
}

// newJitter returns a jitter that draws from src, or nil (the global
// source) when src is nil.
func newJitter(src rand.Source) *jitter {
	if src == nil {
		return nil
	}
	return &jitter{r: rand.New(src)}
}

// n returns a duration in [0, d); d must be positive.
func (j *jitter) n(d time.Duration) time.Duration {
	if j == nil {
		return rand.N(d)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return time.Duration(j.r.Int64N(int64(d)))
}

// uuid returns a random UUID (version 4): a lock's token, a fair
// waiter's or a writer's id. Without a seeded source it comes from
// crypto/rand, as tokens must not be guessed.
func (j *jitter) uuid() string {
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

// uint64 returns a random uint64.
func (j *jitter) uint64() uint64 {
	if j == nil {
		return rand.Uint64()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.r.Uint64()
}

// intN returns an int in [0, n); n must be positive.
func (j *jitter) intN(n int) int {
	if j == nil {
		return rand.IntN(n)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.r.IntN(n)
}

// backoff returns the delay before retry number attempt+1: a random
// duration in [d/2, d] where d = min(ceiling, floor×2^attempt), drawn
// from j.
func backoff(j *jitter, floor, ceiling time.Duration, attempt int) time.Duration {
	d := ceiling
	if attempt < 30 {
		if e := floor << attempt; e > 0 && e < ceiling {
			d = e
		}
	}
	half := d / 2
	return half + j.n(d-half+1)
}
