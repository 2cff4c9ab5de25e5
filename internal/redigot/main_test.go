package redigot

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// paused pauses s (SIGSTOP) until the test ends.
func paused(t *testing.T, s *redistest.Server) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
}

// ctx5s is a context that ends in 5 s or with the test.
func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}
