package election_test

// Election.Leader against tampered
// masters, a reader with exactly the documented ACL, and a frozen
// majority.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A master that lost the term field but kept the token, or whose term
// field was changed, adds no vote to a pair: Leader reports the leader
// while a quorum still agrees on (token, term), and a hand-over (never a
// pair) once fewer than a quorum do.
func TestLeader_tamperedTermFieldsAddNoVote(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	c := rs.client(t, pipelinedPath)
	e := newElection(t, c, "tt", election.WithTTL(10*time.Second))
	ld, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(context.Background())
	field := keys.TermField(ld.Lock().Token())
	meta := layout.MetaKey("tt")
	waitUntil(t, "the term on every master", func() bool {
		for _, s := range rs.servers {
			if v, _ := redis.String(s.Do("HGET", meta, field)); v == "" {
				return false
			}
		}
		return true
	})
	if _, err := rs.servers[0].Do("HDEL", meta, field); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Leader(ctx); err != nil || got.Value != "v" || got.Term != ld.Term() {
		t.Fatalf("one master without the term: %+v, %v", got, err)
	}
	// Another master names a later term for the same token.
	if _, err := rs.servers[1].Do("HSET", meta, field, ld.Term()+1); err != nil {
		t.Fatal(err)
	}
	got, err := e.Leader(ctx)
	if !errors.Is(err, election.ErrHandOver) || !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("one master without the term, one with another: %+v, %v; want ErrHandOver", got, err)
	}
	if !strings.Contains(err.Error(), "tt") {
		t.Errorf("the error does not name the key: %v", err)
	}
	// A term that is no number on the third: that master fails, naming it.
	if _, err := rs.servers[2].Do("HSET", meta, field, "seven"); err != nil {
		t.Fatal(err)
	}
	_, err = e.Leader(ctx)
	if err == nil || errors.Is(err, election.ErrNoLeader) && !errors.Is(err, election.ErrHandOver) {
		t.Fatalf("a malformed term: %v", err)
	}
	t.Logf("a malformed term on one master: %v", err)
	// The hash evicted on two masters (the key kept): a hand-over.
	for _, s := range rs.servers[:2] {
		if _, err := s.Do("DEL", meta); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rs.servers[2].Do("HSET", meta, field, ld.Term()); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Leader(ctx); !errors.Is(err, election.ErrHandOver) {
		t.Fatalf("the metadata hash gone from two masters: %+v, %v; want ErrHandOver", got, err)
	}
	// The leader's watchdog extends the key: the hash is not re-created
	// with a term, so the leader stays unreadable rather than mispaired.
}

// A reader with exactly the ACL docs/operations.md gives for reading
// leaders (+eval +get +hget +pttl on the election's keys) reads the
// leader on both paths; without +hget the refusal is the error, naming
// the master, not "no leader".
func TestLeader_documentedReaderACL(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		e := newElection(t, rs.client(t, path), "svc:acl", election.WithTTL(10*time.Second))
		ld, err := e.Campaign(ctx, "host-1")
		if err != nil {
			t.Fatal(err)
		}
		defer ld.Resign(context.Background())
		keys := "resetkeys ~svc:acl ~" + layout.MetaKey("svc:acl")
		urls := aclUser(t, rs.servers, "reader", "on >reader-secret "+keys+" -@all +eval +get +hget +pttl")
		r := newElection(t, addrClient(t, path, urls), "svc:acl")
		got, err := r.Leader(ctx)
		if err != nil || got.Value != "host-1" || got.Term != ld.Term() {
			t.Fatalf("reader with the documented ACL: %+v, %v", got, err)
		}
		urls = aclUser(t, rs.servers, "nohget", "on >nohget-secret "+keys+" -@all +eval +get +pttl")
		_, err = newElection(t, addrClient(t, path, urls), "svc:acl").Leader(ctx)
		if err == nil || errors.Is(err, election.ErrNoLeader) || !strings.Contains(err.Error(), rs.servers[0].Addr()) {
			t.Fatalf("reader without +hget: %v", err)
		}
		if strings.Contains(err.Error(), "nohget-secret") {
			t.Errorf("the error shows the password: %v", err)
		}
		t.Logf("without +hget: %v", err)
	})
}

// Leader with a frozen majority returns within its ctx (generously
// bounded) with an error that says too few masters were read, naming
// them, and that its ctx ended; not ErrNoLeader.
func TestLeader_frozenMajorityFailsWithinCtx(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	e := newElection(t, rs.client(t, pipelinedPath, redlock.WithTimeout(5*time.Second)), "fm", election.WithTTL(10*time.Second))
	ld, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(context.Background())
	for _, s := range rs.servers[:2] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Resume() })
	}
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err = e.Leader(lctx)
	took := time.Since(start)
	cancel()
	if took > 3*time.Second {
		t.Errorf("Leader took %v with a ctx of 200ms and a per-master timeout of 5s", took)
	}
	if err == nil || errors.Is(err, election.ErrNoLeader) || !strings.Contains(err.Error(), rs.servers[0].Addr()) {
		t.Fatalf("a frozen majority: %v", err)
	}
	// The caller's ctx ended first: the error says so (errors.Is), as
	// every other blocking call's does.
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the error of a Leader whose ctx ended does not match context.DeadlineExceeded: %v", err)
	}
	t.Logf("frozen majority (%v): %v", took, err)
	for _, s := range rs.servers[:2] {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
}

// Many hand-overs (resign with candidates waiting, fair and not): the
// metadata hash never holds more than the holder's value and term, and
// nothing but the fencing counter (and a fair lock's own bookkeeping, if
// it keeps any) is left once every candidate has resigned.
func TestElection_noTermFieldsPileUp(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fair"}[fair], func(t *testing.T) {
			rs := startReal(t, 3)
			ctx := ctxT(t)
			var opts []election.Option
			if fair {
				opts = append(opts, election.WithFair())
			}
			opts = append(opts, election.WithTTL(2*time.Second))
			done := make(chan struct{})
			errs := make(chan error, 3)
			for w := range 3 {
				e := newElection(t, rs.client(t, pipelinedPath), "pile", opts...)
				go func() {
					var err error
					defer func() { errs <- err }()
					for i := range 8 {
						var ld *election.Leadership
						if ld, err = e.Campaign(ctx, strings.Repeat("x", w+i)); err != nil {
							return
						}
						time.Sleep(2 * time.Millisecond) // the subject: a term held a moment before the hand-over
						if err = ld.Resign(ctx); err != nil {
							return
						}
					}
				}()
			}
			go func() {
				defer close(done)
				for range 3 {
					if err := <-errs; err != nil {
						t.Error(err)
					}
				}
			}()
			most := 0
			meta := layout.MetaKey("pile")
		sample:
			for {
				select {
				case <-done:
					break sample
				default:
				}
				for _, s := range rs.servers {
					if n, err := redis.Int(s.Do("HLEN", meta)); err == nil && n > most {
						most = n
					}
				}
			}
			if most > 2 {
				t.Errorf("the metadata hash held %d fields at once", most)
			}
			leftover.None(t, rs.servers) // no metadata hash nor queue after the last resign
			t.Logf("at most %d fields", most)
		})
	}
}

// A campaigner with the lock user's documented ACL plus +pttl (holder
// metadata, docs/operations.md) is elected, its commit records the term
// (fence_commit_term.lua: hset, pttl, pexpire), and its Leader reads it.
func TestElection_campaignWithDocumentedLockACL(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		urls := aclUser(t, rs.servers, "locker", minimalACL+" +pttl")
		e := newElection(t, addrClient(t, path, urls), "lock:el", election.WithTTL(10*time.Second))
		ld, err := e.Campaign(ctx, "me")
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Leader(ctx)
		if err != nil || got.Value != "me" || got.Term != ld.Term() {
			t.Fatalf("Leader: %+v, %v (term %d)", got, err, ld.Term())
		}
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
