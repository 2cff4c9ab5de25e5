package redlock_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A connPath is one of the two ways a Client of redigo pools carries its
// commands to a master: pipelined (all goroutines share one connection
// per master) or pooled (each command borrows a pooled connection). Every
// test whose behaviour depends on the path runs on both, as subtests
// named after them, through forEachPath; the others pick one.
type connPath struct {
	name      string
	pipelined bool
}

var (
	pipelinedPath = connPath{"pipelined", true}
	pooledPath    = connPath{"pooled", false}
)

// Option is the option that puts a client on the path.
func (p connPath) Option() redlock.Option { return redigo.WithPipelining(p.pipelined) }

func (p connPath) String() string { return p.name }

// forEachPath runs f as the subtests "pipelined" and "pooled", each given
// its path to hand every client it makes.
func forEachPath(t *testing.T, f func(t *testing.T, path connPath)) {
	t.Helper()
	for _, p := range []connPath{pipelinedPath, pooledPath} {
		t.Run(p.name, func(t *testing.T) { f(t, p) })
	}
}
