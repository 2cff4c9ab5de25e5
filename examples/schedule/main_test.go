package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain is also a replica when the scenario runs the test binary as one.
func TestMain(m *testing.M) {
	if name := os.Getenv(replicaEnv); name != "" {
		os.Exit(replica(name))
	}
	goleak.VerifyTestMain(m)
}
