package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestOptions_rejectBelowMinimums(t *testing.T) {
	fs := newFakes(t, 3)
	for _, tc := range []struct {
		name string
		opts []redlock.LockOption
		ok   bool
	}{
		{"auto-extend 1ns", []redlock.LockOption{redlock.WithAutoExtend(1)}, false},
		{"auto-extend just below the minimum", []redlock.LockOption{redlock.WithAutoExtend(redlock.MinAutoExtendPeriod - 1)}, false},
		{"auto-extend at the minimum", []redlock.LockOption{redlock.WithAutoExtend(redlock.MinAutoExtendPeriod)}, true},
		{"default period of a TTL too short for it", []redlock.LockOption{redlock.WithTTL(3*redlock.MinAutoExtendPeriod - time.Millisecond), redlock.WithAutoExtend(0)}, false},
		{"backoff 1ns, 1ns", []redlock.LockOption{redlock.WithBackoff(1, 1)}, false},
		{"backoff min just below the minimum", []redlock.LockOption{redlock.WithBackoff(redlock.BackoffFloor-1, time.Second)}, false},
		{"backoff at the minimum", []redlock.LockOption{redlock.WithBackoff(redlock.BackoffFloor, redlock.BackoffFloor)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fs.client
			if tc.name == "default period of a TTL too short for it" {
				// A TTL this short needs a short per-master timeout.
				c = newFakes(t, 3, redlock.WithTimeout(5*time.Millisecond)).client
			}
			l, err := c.TryAcquire(context.Background(), "k", tc.opts...)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, redlock.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	// An acquisition returns at a quorum: the third master's SET may
	// still be on its way.
	for i, m := range fs.masters {
		redistest.Within(5*time.Second, func() bool { return m.Calls("SET") >= 2 })
		if n := m.Calls("SET"); n != 2 {
			t.Errorf("master %d got %d SETs, want 2 (the accepted options only)", i, n)
		}
	}
}

// TestZeroAndNil_failWithErrInvalid calls every exported method of Client,
// Lock and Reentrant on a nil pointer and on a zero value (one that no
// constructor made): none panics, and those that return an error return
// one matching ErrInvalid.
func TestZeroAndNil_failWithErrInvalid(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	clientCalls := map[string]func(c *redlock.Client) error{
		"Masters": func(c *redlock.Client) error { return zeroInt(c.Masters()) },
		"Quorum":  func(c *redlock.Client) error { return zeroInt(c.Quorum()) },
		"Close":   func(c *redlock.Client) error { return c.Close() },
		"Acquire": func(c *redlock.Client) error { _, err := c.Acquire(ctx, "k"); return err },
		"TryAcquire": func(c *redlock.Client) error {
			_, err := c.TryAcquire(ctx, "k", redlock.WithFair())
			return err
		},
		"AcquireRead":  func(c *redlock.Client) error { _, err := c.AcquireRead(ctx, "k"); return err },
		"AcquireWrite": func(c *redlock.Client) error { _, err := c.AcquireWrite(ctx, "k"); return err },
		"AcquireMulti": func(c *redlock.Client) error { _, err := c.AcquireMulti(ctx, []string{"a", "b"}); return err },
		"NewReentrant": func(c *redlock.Client) error { _, err := c.NewReentrant("k", ""); return err },
		"Do":           func(c *redlock.Client) error { return c.Do(ctx, "k", fn) },
	}
	lockCalls := map[string]func(l *redlock.Lock) error{
		"Key":   func(l *redlock.Lock) error { return zeroString(l.Key()) },
		"Token": func(l *redlock.Lock) error { return zeroString(l.Token()) },
		"Until": func(l *redlock.Lock) error {
			if !l.Until().IsZero() {
				return fmt.Errorf("Until = %v", l.Until())
			}
			return redlock.ErrInvalid
		},
		"Fence": func(l *redlock.Lock) error { return zeroInt(int(l.Fence())) },
		"Keys": func(l *redlock.Lock) error {
			if len(l.Keys()) != 0 {
				return fmt.Errorf("Keys = %q", l.Keys())
			}
			return redlock.ErrInvalid
		},
		"Extend":  func(l *redlock.Lock) error { return l.Extend(ctx, time.Second) },
		"Release": func(l *redlock.Lock) error { return l.Release(ctx) },
		"Lost": func(l *redlock.Lock) error {
			select {
			case <-l.Lost():
				return redlock.ErrInvalid
			default:
				return errors.New("Lost not closed")
			}
		},
		"Err": func(l *redlock.Lock) error { return l.Err() },
	}
	reentrantCalls := map[string]func(r *redlock.Reentrant) error{
		"Key":     func(r *redlock.Reentrant) error { return zeroString(r.Key()) },
		"Owner":   func(r *redlock.Reentrant) error { return zeroString(r.Owner()) },
		"Count":   func(r *redlock.Reentrant) error { return zeroInt(int(r.Count())) },
		"Lock":    func(r *redlock.Reentrant) error { return r.Lock().Err() },
		"Acquire": func(r *redlock.Reentrant) error { return r.Acquire(ctx) },
		"Release": func(r *redlock.Reentrant) error { return r.Release(ctx) },
	}
	check := func(t *testing.T, call func() error) {
		t.Helper()
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("panic: %v", p)
			}
		}()
		if err := call(); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
	}
	for name, call := range clientCalls {
		t.Run("nil Client."+name, func(t *testing.T) { check(t, func() error { return call(nil) }) })
		t.Run("zero Client."+name, func(t *testing.T) { check(t, func() error { return call(&redlock.Client{}) }) })
	}
	for name, call := range lockCalls {
		t.Run("nil Lock."+name, func(t *testing.T) { check(t, func() error { return call(nil) }) })
		t.Run("zero Lock."+name, func(t *testing.T) { check(t, func() error { return call(&redlock.Lock{}) }) })
	}
	for name, call := range reentrantCalls {
		t.Run("nil Reentrant."+name, func(t *testing.T) { check(t, func() error { return call(nil) }) })
		t.Run("zero Reentrant."+name, func(t *testing.T) { check(t, func() error { return call(&redlock.Reentrant{}) }) })
	}
}

// zeroInt and zeroString turn an accessor's zero result into ErrInvalid,
// for the table above.
func zeroInt(n int) error {
	if n != 0 {
		return fmt.Errorf("got %d, want 0", n)
	}
	return redlock.ErrInvalid
}

func zeroString(s string) error {
	if s != "" {
		return fmt.Errorf("got %q, want empty", s)
	}
	return redlock.ErrInvalid
}
