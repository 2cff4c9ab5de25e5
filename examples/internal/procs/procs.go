// Package procs runs the instances of an example as separate processes
// and keeps what each prints, for the examples whose scenarios freeze,
// wake and kill them.
package procs

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// Proc is a running instance and its output so far.
type Proc struct {
	Cmd *exec.Cmd
	mu  sync.Mutex
	out []string
}

// Find returns the first line of the instance's output that contains s.
func (p *Proc) Find(s string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.out {
		if strings.Contains(l, s) {
			return l, true
		}
	}
	return "", false
}

// Signal sends sig to the instance.
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Group is the instances of one scenario.
type Group struct {
	Procs map[string]*Proc
	wg    sync.WaitGroup
}

// Start starts exe once per name, with the environment os.Environ() plus
// env(name), and passes each line an instance prints (stdout and stderr)
// to say with its name. Stop ends them.
func Start(exe string, names []string, env func(name string) []string, say func(name, line string)) (*Group, error) {
	g := &Group{Procs: map[string]*Proc{}}
	for _, name := range names {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), env(name)...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			g.Stop()
			return nil, err
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			g.Stop()
			return nil, err
		}
		p := &Proc{Cmd: cmd}
		g.Procs[name] = p
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.mu.Lock()
				p.out = append(p.out, sc.Text())
				p.mu.Unlock()
				say(name, sc.Text())
			}
		}()
	}
	return g, nil
}

// Stop wakes every instance (SIGCONT), ends it (SIGTERM) and waits for it
// and its output.
func (g *Group) Stop() {
	for _, p := range g.Procs {
		_ = p.Signal(syscall.SIGCONT)
		_ = p.Signal(syscall.SIGTERM)
	}
	for _, p := range g.Procs {
		_ = p.Cmd.Wait()
	}
	g.wg.Wait()
}
