package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// exitNoCommand is the shell's code for a command that cannot be run.
const exitNoCommand = 127

const execLine = "usage: redlock exec [--ttl D] [--wait D] [--grace D] [--fence] [--permits K] [--min-hold D] KEY -- COMMAND [ARGS...]\n\n" +
	"Runs COMMAND while holding the lock on KEY, with QUORUMLOCK_KEY=KEY (and,\n" +
	"with --fence, QUORUMLOCK_FENCE=the fencing token) in its environment. The\n" +
	"lock is extended every ttl/3; if it is lost, COMMAND gets SIGTERM, then\n" +
	"SIGKILL after --grace, and redlock exits 76. Without the lock nothing runs\n" +
	"and redlock exits 75.\n\n" +
	"With --permits K, KEY is a semaphore of K permits: COMMAND runs while it\n" +
	"holds one of them (at most K at once), with QUORUMLOCK_PERMIT=its slot\n" +
	"(0 to K-1); the host and process ID are kept with the permit for\n" +
	"redlock status --permits K KEY.\n\n" +
	"With --min-hold, a command that ends sooner leaves the\n" +
	"key held until --min-hold after the acquisition, so a replica whose schedule\n" +
	"fires late does not run the same slot again."

type execFlags struct {
	fs               *flag.FlagSet
	ttl, wait, grace *time.Duration
	minHold          *time.Duration
	fence            *bool
	permits          *int
}

func newExecFlags() *execFlags {
	fs := newFlagSet("exec")
	return &execFlags{
		fs:      fs,
		ttl:     fs.Duration("ttl", 30*time.Second, "the lock's time to live; it is extended every ttl/3 while the command runs"),
		wait:    fs.Duration("wait", 0, "how long to wait for the lock; the default, 0, makes one attempt and exits 75 when it is held"),
		grace:   fs.Duration("grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL"),
		fence:   fs.Bool("fence", false, "take a fencing token and export it as QUORUMLOCK_FENCE"),
		permits: fs.Int("permits", 0, "KEY is a semaphore of this many permits: run while holding one of them"),
		minHold: fs.Duration("min-hold", 0, "keep the lock at least this long from its acquisition: a command that ends sooner leaves "+
			"the key to expire then instead of deleting it (for scheduled jobs: at least the schedule's period)"),
	}
}

func execUsage() string { return flagUsage(newExecFlags().fs, execLine) }

// parseExec parses exec's command line: flags, KEY, "--", COMMAND.
func parseExec(args []string) (runner, error) {
	f := newExecFlags()
	if err := f.fs.Parse(args); err != nil {
		return nil, err
	}
	key, command, err := keyAndCommand(f.fs.Args())
	if err != nil {
		return nil, err
	}
	if *f.grace < 0 {
		return nil, usageError{"--grace must not be negative"}
	}
	if p := *f.permits; p < 0 || p > redlock.MaxPermits {
		return nil, usageError{fmt.Sprintf("--permits must be 1 to %d, got %d", redlock.MaxPermits, p)}
	}
	if *f.minHold < 0 {
		return nil, usageError{"--min-hold must not be negative"}
	}
	o := execOpts{ttl: *f.ttl, wait: *f.wait, grace: *f.grace, minHold: *f.minHold, fence: *f.fence, permits: *f.permits}
	return func(ctx context.Context, e *env) int {
		return cmdExec(ctx, e, key, command, o)
	}, nil
}

// keyAndCommand splits what follows the flags of exec and elect: KEY, "--"
// (also accepted before KEY), COMMAND [ARGS...].
func keyAndCommand(rest []string) (key string, command []string, err error) {
	if len(rest) > 0 && rest[0] == "--" { // "--" before KEY
		rest = rest[1:]
	}
	switch {
	case len(rest) == 0:
		return "", nil, usageError{"no KEY and no COMMAND: give KEY -- COMMAND [ARGS...]"}
	case len(rest) == 1:
		return "", nil, usageError{fmt.Sprintf("no COMMAND after KEY %q: give KEY -- COMMAND [ARGS...]", rest[0])}
	}
	key, command = rest[0], rest[1:]
	if command[0] == "--" {
		command = command[1:]
	}
	if len(command) == 0 {
		return "", nil, usageError{fmt.Sprintf("no COMMAND after %q --: give KEY -- COMMAND [ARGS...]", key)}
	}
	return key, command, nil
}

// execOpts are exec's flags.
type execOpts struct {
	ttl, wait, grace, minHold time.Duration
	fence                     bool
	permits                   int
}

// cmdExec runs a command while holding the lock.
func cmdExec(ctx context.Context, e *env, key string, command []string, o execOpts) int {
	opts := []redlock.LockOption{redlock.WithTTL(o.ttl), redlock.WithWait(o.wait), redlock.WithAutoExtend(0),
		redlock.WithMinHold(o.minHold)}
	if o.fence {
		opts = append(opts, redlock.WithFencing())
	}
	var l *redlock.Lock
	var err error
	vars := []string{"QUORUMLOCK_KEY=" + key}
	lost := "lock " + strconv.Quote(key) + " lost"
	if o.permits > 0 {
		var p *redlock.Permit
		p, err = acquirePermit(ctx, e, key, o.permits, opts)
		if err == nil {
			l = p.Lock
			vars = append(vars, "QUORUMLOCK_PERMIT="+strconv.Itoa(p.Slot()))
			lost = fmt.Sprintf("permit %d of semaphore %q lost", p.Slot(), key)
		}
	} else {
		l, err = e.client.Acquire(ctx, key, opts...)
	}
	if err != nil {
		// The error states the key and the outcome itself.
		printErr(e.stderr, err)
		return failCode(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+2*e.timeout)
		defer cancel()
		if err := l.Release(rctx); err != nil && !errors.Is(err, redlock.ErrNotHeld) {
			printErr(e.stderr, err)
		}
	}()

	if o.fence {
		vars = append(vars, "QUORUMLOCK_FENCE="+strconv.FormatUint(l.Fence(), 10))
	}
	return runHeld(ctx, e, l, lost, command, vars, o.grace)
}

// acquirePermit takes one of permits permits of the semaphore on key, with
// the host and process ID as its metadata.
func acquirePermit(ctx context.Context, e *env, key string, permits int, opts []redlock.LockOption) (*redlock.Permit, error) {
	host, _ := os.Hostname()
	opts = append(opts, redlock.WithMetadata(fmt.Sprintf("host=%s pid=%d", host, os.Getpid())))
	s, err := e.client.NewSemaphore(key, permits, opts...)
	if err != nil {
		return nil, err
	}
	return s.Acquire(ctx)
}

// runHeld runs command, with vars added to its environment, while l is
// held: when l is lost it stops the command (SIGTERM, SIGKILL after grace)
// and returns exitLost; else the command's own exit code. lost begins the
// message printed on loss. (exec and elect)
func runHeld(ctx context.Context, e *env, l *redlock.Lock, lost string, command, vars []string, grace time.Duration) int {
	key := l.Key()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(), vars...)
	// Its own process group, so that a kill reaches what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(e.stderr, "redlock: %v\n", err)
		return exitNoCommand
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// stop sends SIGTERM to the command's group, and SIGKILL after the
	// grace period; it returns the command's end.
	stop := func() error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case err := <-done:
			return err
		case <-t.C:
			fmt.Fprintf(e.stderr, "redlock: the command did not stop within %v: SIGKILL\n", grace)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			return <-done
		}
	}
	select {
	case err := <-done:
		return exitCode(err)
	case <-l.Lost():
		fmt.Fprintf(e.stderr, "redlock: %s while the command ran%s; stopping it\n", lost, lostReason(l.Err(), key))
		_ = stop() // the lock's loss decides the exit code, not the command's end
		return exitLost
	case <-ctx.Done():
		// redlock itself was interrupted: pass it on, then release.
		return exitCode(stop())
	}
}

// exitCode is the command's exit code: its own, or 128+n when signal n
// ended it.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitFailure
}

// lostReason is why a lock was lost, as ": reason" without what the
// message around it says already (the prefix, the key, "lost"), or "".
func lostReason(err error, key string) string {
	if err == nil {
		return ""
	}
	r := strings.TrimPrefix(err.Error(), "redlock: ")
	r = strings.TrimPrefix(r, "lock "+strconv.Quote(key)+" ")
	r = strings.TrimPrefix(strings.TrimPrefix(r, "lost"), ": ")
	if r == "" {
		return ""
	}
	return ": " + r
}
