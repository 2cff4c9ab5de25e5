package planted

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// startThree is a helper only: this file runs no test that starts Redis.
func startThree(t *testing.T) []*redistest.Server { return redistest.Start(t, 3) }

type harness struct{}

func (harness) up(t *testing.T) { startThree(t) }
