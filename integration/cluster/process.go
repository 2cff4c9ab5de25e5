package cluster

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/clockfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// processNode is a redis-server process on 127.0.0.1, with the clock it
// runs under when the cluster has clock faults.
type processNode struct {
	s   *redistest.Server
	clk *clockfault.Clock
}

func startProcesses(t testing.TB, n int, cfg *config) ([]node, error) {
	t.Helper()
	nodes := make([]node, n)
	for i := range nodes {
		opts := []redistest.Option{redistest.WithArgs(cfg.redisArgs()...)}
		var clk *clockfault.Clock
		if cfg.clocks {
			var err error
			if clk, err = clockfault.New(t.TempDir()); err != nil {
				return nil, err
			}
			t.Cleanup(func() { clk.Close() })
			env, err := clk.Env()
			if err != nil {
				return nil, err
			}
			opts = append(opts, redistest.WithEnv(env...))
		}
		nodes[i] = processNode{redistest.StartOne(t, opts...), clk}
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

func (p processNode) clock() *clockfault.Clock { return p.clk }

func (p processNode) logs() string {
	out := p.s.LogTail(20)
	if out == "" {
		return "\n\tredis-server log: (empty)"
	}
	return "\n\tredis-server log (last 20 lines):\n\t\t" + strings.ReplaceAll(out, "\n", "\n\t\t")
}
