package redlock_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// exampleMasters are three redis-server processes on 127.0.0.1 that the
// examples use; tests start their own.
var exampleMasters []string

func TestMain(m *testing.M) {
	stop := func() {}
	if !redistest.ShortExamples() {
		addrs, stopMasters, err := redistest.Launch(3)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		exampleMasters, stop = addrs, stopMasters
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
