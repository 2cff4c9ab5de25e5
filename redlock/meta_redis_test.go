package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// metaOn returns the metadata field tok has in key's metadata hash on each
// master, and the hash's TTL there (-2 when it does not exist).
func (rs *realSet) metaOn(t *testing.T, key, tok string) ([]string, []int64) {
	t.Helper()
	vals := make([]string, len(rs.servers))
	ttls := make([]int64, len(rs.servers))
	for i, s := range rs.servers {
		v, err := redis.String(s.Do("HGET", layout.MetaKey(key), tok))
		if err != nil && !errors.Is(err, redis.ErrNil) {
			t.Fatalf("HGET on master %d: %v", i, err)
		}
		vals[i] = v
		if ttls[i], err = redis.Int64(s.Do("PTTL", layout.MetaKey(key))); err != nil {
			t.Fatal(err)
		}
	}
	return vals, ttls
}

// inspectMeta returns, per master, the metadata Inspect shows for the
// holder tok.
func inspectMeta(t *testing.T, c *redlock.Client, key, tok string) []string {
	t.Helper()
	in, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(in.Masters))
	for i, m := range in.Masters {
		if m.Err != nil {
			t.Fatalf("master %d: %v", i, m.Err)
		}
		for _, h := range m.State.Holders {
			if h.Token == tok {
				out[i] = h.Meta
			}
		}
	}
	return out
}

// eventually waits up to two seconds for cond: a round returns once a
// quorum answered, and the other masters run its command a moment later.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 2*time.Second, what, cond)
}

func all(vals []string, want string) bool {
	for _, v := range vals {
		if v != want {
			return false
		}
	}
	return true
}

// Every lock kind keeps its holder's metadata on every master for as long
// as the hold lasts — across extensions — and takes it away with the hold;
// Inspect shows it. A lock without metadata leaves no metadata key.
func TestMetadata_everyKind(t *testing.T) {
	type hold struct {
		tok     string
		extend  func() error
		release func() error
	}
	ctx := context.Background()
	kinds := map[string]func(t *testing.T, c *redlock.Client, key, meta string) hold{
		"plain": func(t *testing.T, c *redlock.Client, key, meta string) hold {
			l, err := c.Acquire(ctx, key, redlock.WithTTL(5*time.Second), redlock.WithMetadata(meta))
			if err != nil {
				t.Fatal(err)
			}
			if l.Metadata() != meta {
				t.Fatalf("Metadata = %q", l.Metadata())
			}
			return hold{l.Token(), func() error { return l.Extend(ctx, 20*time.Second) }, func() error { return l.Release(ctx) }}
		},
		"fenced and fair": func(t *testing.T, c *redlock.Client, key, meta string) hold {
			l, err := c.Acquire(ctx, key, redlock.WithTTL(5*time.Second), redlock.WithMetadata(meta), redlock.WithFencing(), redlock.WithFair())
			if err != nil {
				t.Fatal(err)
			}
			return hold{l.Token(), func() error { return l.Extend(ctx, 20*time.Second) }, func() error { return l.Release(ctx) }}
		},
		"read": func(t *testing.T, c *redlock.Client, key, meta string) hold {
			l, err := c.AcquireRead(ctx, key, redlock.WithTTL(5*time.Second), redlock.WithMetadata(meta))
			if err != nil {
				t.Fatal(err)
			}
			return hold{l.Token(), func() error { return l.Extend(ctx, 20*time.Second) }, func() error { return l.Release(ctx) }}
		},
		"write": func(t *testing.T, c *redlock.Client, key, meta string) hold {
			l, err := c.AcquireWrite(ctx, key, redlock.WithTTL(5*time.Second), redlock.WithMetadata(meta))
			if err != nil {
				t.Fatal(err)
			}
			return hold{l.Token(), func() error { return l.Extend(ctx, 20*time.Second) }, func() error { return l.Release(ctx) }}
		},
		"multi": func(t *testing.T, c *redlock.Client, key, meta string) hold {
			l, err := c.AcquireMulti(ctx, []string{key, key + "-b"}, redlock.WithTTL(5*time.Second), redlock.WithMetadata(meta))
			if err != nil {
				t.Fatal(err)
			}
			return hold{l.Token(), func() error { return l.Extend(ctx, 20*time.Second) }, func() error { return l.Release(ctx) }}
		},
		"reentrant": func(t *testing.T, c *redlock.Client, key, meta string) hold {
			r, err := c.NewReentrant(key, "owner-1", redlock.WithTTL(5*time.Second), redlock.WithMetadata(meta))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
			return hold{"owner-1",
				func() error {
					if err := r.Acquire(ctx); err != nil { // a second hold keeps it
						return err
					}
					if err := r.Release(ctx); err != nil { // and so does giving it back
						return err
					}
					return r.Lock().Extend(ctx, 20*time.Second)
				},
				func() error { return r.Release(ctx) }}
		},
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, n := range []int{1, 5} {
			rs := startReal(t, n)
			c := rs.client(t, path)
			for name, take := range kinds {
				t.Run(name, func(t *testing.T) {
					key := "meta-" + strings.ReplaceAll(name, " ", "-")
					meta := "host=a pid=1 " + name
					h := take(t, c, key, meta)
					eventually(t, "metadata not on every master", func() bool {
						vals, ttls := rs.metaOn(t, key, h.tok)
						return all(vals, meta) && ttls[0] > 0 && ttls[0] <= 5000
					})
					if got := inspectMeta(t, c, key, h.tok); !all(got, meta) {
						t.Fatalf("N=%d: Inspect shows %q", n, got)
					}
					if err := h.extend(); err != nil {
						t.Fatal(err)
					}
					eventually(t, "metadata not kept alive by the extension", func() bool {
						vals, ttls := rs.metaOn(t, key, h.tok)
						return all(vals, meta) && ttls[n-1] > 15000
					})
					if err := h.release(); err != nil {
						t.Fatal(err)
					}
					eventually(t, "metadata kept after the release", func() bool {
						for _, s := range rs.servers {
							if ex, _ := redis.Int(s.Do("EXISTS", layout.MetaKey(key))); ex != 0 {
								return false
							}
						}
						return true
					})
				})
			}
			t.Run("none", func(t *testing.T) {
				l, err := c.Acquire(ctx, "meta-none")
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx)
				for i, s := range rs.servers {
					if ex, _ := redis.Int(s.Do("EXISTS", layout.MetaKey("meta-none"))); ex != 0 {
						t.Fatalf("master %d has a metadata key for a lock without metadata", i)
					}
				}
			})
		}
	})
}

// Two readers each have their own metadata; a failed attempt leaves none;
// metadata written by anyone into the hash neither takes nor frees a lock.
func TestMetadata_readersFailuresAndForgeries(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := context.Background()
		r1, err := c.AcquireRead(ctx, "rw", redlock.WithMetadata("reader one"))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := c.AcquireRead(ctx, "rw", redlock.WithMetadata("reader two"))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the readers' metadata", func() bool {
			return all(inspectMeta(t, c, "rw", r1.Token()), "reader one") && all(inspectMeta(t, c, "rw", r2.Token()), "reader two")
		})
		if err := r1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a released reader's metadata stays", func() bool {
			a, _ := rs.metaOn(t, "rw", r1.Token())
			return all(a, "")
		})
		if b := inspectMeta(t, c, "rw", r2.Token()); !all(b, "reader two") {
			t.Fatalf("%q", b)
		}
		_ = r2.Release(ctx)

		held, err := c.Acquire(ctx, "busy", redlock.WithMetadata("holder"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.TryAcquire(ctx, "busy", redlock.WithMetadata("intruder"))
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("err = %v", err)
		}
		// Acquire returns at a quorum: the last master's grant may come
		// later, or never (the intruder's attempt, rolled back since, may
		// have reached it first). Every master that grants the holder
		// keeps its metadata, and only its; the others keep nothing.
		settled := func(s *redistest.Server) bool {
			v, err := redis.String(s.Do("GET", "busy"))
			if err != nil && !errors.Is(err, redis.ErrNil) {
				t.Fatal(err)
			}
			meta, err := redis.StringMap(s.Do("HGETALL", layout.MetaKey("busy")))
			if err != nil {
				t.Fatal(err)
			}
			if v == held.Token() {
				return len(meta) == 1 && meta[v] == "holder"
			}
			return v == "" && len(meta) == 0
		}
		eventually(t, "the holder's metadata on every master that holds it, a quorum", func() bool {
			n := 0
			for _, s := range rs.servers {
				if !settled(s) {
					return false
				}
				if v, _ := redis.String(s.Do("GET", "busy")); v == held.Token() {
					n++
				}
			}
			return n >= 2
		})
		for _, s := range rs.servers {
			// A forged field for another token is only data.
			if _, err := s.Do("HSET", layout.MetaKey("busy"), "forged", "x"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.TryAcquire(ctx, "busy"); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("err = %v", err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Metadata beyond layout.MaxMeta is refused before anything is sent.
func TestClient_WithMetadata_tooLong(t *testing.T) {
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath)
	_, err := c.TryAcquire(context.Background(), "k", redlock.WithMetadata(strings.Repeat("x", layout.MaxMeta+1)))
	if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), "metadata") {
		t.Fatalf("err = %v", err)
	}
	if ex, _ := redis.Int(rs.servers[0].Do("EXISTS", "k")); ex != 0 {
		t.Fatal("the key was set")
	}
}

// Holder metadata needs +pttl beyond the minimal ACL (docs/operations.md):
// without it the refusal says so; with it every kind and an election work.
func TestMetadata_minimalACLPlusPttl(t *testing.T) {
	servers := redistest.Start(t, 3)
	ctx := ctxT(t)
	without := addrClient(t, pipelinedPath, aclUser(t, servers, "locker", minimalACL))
	_, err := without.TryAcquire(ctx, "lock:m", redlock.WithMetadata("me"))
	if err == nil || !strings.Contains(err.Error(), "+pttl") {
		t.Fatalf("without +pttl: %v", err)
	}
	c := addrClient(t, pipelinedPath, aclUser(t, servers, "metalocker", minimalACL+" +pttl"))
	l, err := c.Acquire(ctx, "lock:m", redlock.WithMetadata("me"), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.AcquireRead(ctx, "lock:rw", redlock.WithMetadata("me"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := election.New(c, "lock:e")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
