package cluster

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// processNode is a redis-server process on 127.0.0.1.
type processNode struct{ s *redistest.Server }

func startProcesses(t testing.TB, n int, cfg *config) ([]node, error) {
	t.Helper()
	nodes := make([]node, n)
	for i := range nodes {
		nodes[i] = processNode{redistest.StartOne(t, redistest.WithArgs(cfg.redisArgs()...))}
	}
	return nodes, nil
}

func (p processNode) addr() string     { return p.s.Addr() }
func (p processNode) pause() error     { return p.s.Pause() }
func (p processNode) resume() error    { return p.s.Resume() }
func (p processNode) kill() error      { return p.s.Kill() }
func (p processNode) stop() error      { return p.s.Stop() }
func (p processNode) start() error     { return p.s.Start() }
func (p processNode) partition() error { return ErrUnsupported }
func (p processNode) heal() error      { return ErrUnsupported }
