package cluster

import (
	"testing"

	dc "github.com/ory/dockertest/v3/docker"
)

// SetFreePort makes the Docker backend draw its host ports from f until
// the returned restore is called.
func SetFreePort(f func(testing.TB) (int, error)) (restore func()) {
	old := freePort
	freePort = f
	return func() { freePort = old }
}

// SetAfterRun makes the Docker backend call f with every container it
// starts for a master, before it waits for it to answer, until the
// returned restore is called.
func SetAfterRun(f func(client *dc.Client, id string)) (restore func()) {
	old := afterRun
	afterRun = f
	return func() { afterRun = old }
}
