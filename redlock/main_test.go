package redlock_test

import (
	"os"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// exampleMasters are three redis-server processes on 127.0.0.1 that the
// examples use; tests start their own.
var exampleMasters []string

func TestMain(m *testing.M) { os.Exit(redistest.RunWithExamples(m, &exampleMasters)) }
