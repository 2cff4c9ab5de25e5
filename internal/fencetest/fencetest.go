// Package fencetest checks what a fence.Store guarantees, on any backend
// (a redigo pool, a lock transport), against a real Redis.
package fencetest

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/quorumlock/quorumlock/fence"
)

// ReadTurnsAwayOlderHolders checks Read, Update, Set, Get and Highest on s,
// whose Redis is empty at key.
func ReadTurnsAwayOlderHolders(ctx context.Context, t *testing.T, s *fence.Store, key string) {
	t.Helper()
	if v, ok, err := s.Read(ctx, key, 3); err != nil || ok || v != nil {
		t.Fatalf("Read of a missing key: %q, %v, %v", v, ok, err)
	}
	if err := s.Set(ctx, key, 3, []byte("3"), 0); err != nil {
		t.Fatal(err)
	}
	// Holder 5 reads: holder 4, which has not written yet, can no longer.
	if v, ok, err := s.Read(ctx, key, 5); err != nil || !ok || string(v) != "3" {
		t.Fatalf("Read by 5: %q, %v, %v", v, ok, err)
	}
	var se *fence.StaleError
	if err := s.Set(ctx, key, 4, []byte("4"), 0); !errors.As(err, &se) || se.Highest != 5 || se.Token != 4 {
		t.Fatalf("Set by 4 after 5 read: %v, want a StaleError 4 < 5", err)
	}
	if _, _, err := s.Read(ctx, key, 4); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Read by 4 after 5 read: %v, want ErrStale", err)
	}
	incr := func(old []byte, _ bool) ([]byte, error) {
		n, _ := strconv.Atoi(string(old))
		return []byte(strconv.Itoa(n + 1)), nil
	}
	if err := s.Update(ctx, key, 5, 0, incr); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, key, 4, 0, incr); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Update by 4: %v, want ErrStale", err)
	}
	if err := s.Update(ctx, key, 1<<60, 0, incr); err != nil {
		t.Fatalf("a token beyond 2^53: %v", err)
	}
	if _, _, err := s.Read(ctx, key, 1<<59); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("tokens compare exactly beyond 2^53: %v", err)
	}
	fnErr := errors.New("fn failed")
	if err := s.Update(ctx, key, 1<<60, 0, func([]byte, bool) ([]byte, error) { return nil, fnErr }); !errors.Is(err, fnErr) {
		t.Fatalf("fn's error: %v", err)
	}
	if v, ok, err := s.Get(ctx, key); err != nil || !ok || string(v) != "5" {
		t.Fatalf("Get: %q, %v, %v; want 5", v, ok, err)
	}
	if h, err := s.Highest(ctx, key); err != nil || h != 1<<60 {
		t.Fatalf("Highest: %d, %v", h, err)
	}
	if err := s.Update(ctx, "", 1, 0, incr); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
	if _, _, err := s.Read(ctx, key, 0); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("token 0: %v", err)
	}
}
