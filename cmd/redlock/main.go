// Command redlock operates quorumlock locks from the shell.
//
//	redlock [global flags] exec [flags] KEY -- COMMAND [ARGS...]
//	redlock [global flags] status KEY...
//	redlock [global flags] doctor
//	redlock [global flags] bench [flags]
//
// exec runs a command while holding the lock on KEY — a distributed flock
// for cron jobs: only one instance runs. The lock is extended while the
// command runs; if it is lost the command gets SIGTERM, then SIGKILL after
// a grace period. status shows, per master, who holds keys and for how
// long. doctor checks each master's role, persistence, eviction policy,
// clock and round-trip time. bench measures acquire+release.
//
// The masters come from --masters or REDLOCK_MASTERS: comma-separated
// host:port or redis:// / rediss:// URLs. Passwords are never printed.
//
// Exit codes: 0 success (exec: the command's own code is passed through;
// 128+n when it died of signal n), 64 bad usage, 69 masters unusable,
// 75 the lock was not acquired (exec), 76 the lock was lost while the
// command ran (exec; the command was terminated), 1 other failures
// (doctor: a master needs attention).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 64 // EX_USAGE
	exitUnavailable = 69 // EX_UNAVAILABLE
	exitNotAcquired = 75 // EX_TEMPFAIL: try again later
	exitLost        = 76
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: redlock [--masters ADDRS] [--timeout D] [--tls-ca F [--tls-cert F --tls-key F] [--tls-server-name N]] COMMAND ...

commands:
  exec [--ttl D] [--wait D] [--grace D] [--fence] KEY -- COMMAND [ARGS...]
         run COMMAND while holding the lock on KEY
  status KEY...
         per master: reachable, holder, remaining TTL, fence counter, holds
  doctor
         per master: version, role, persistence, eviction, clock, round trip
  bench [--duration D] [--clients N] [--key K]
         acquire+release as fast as possible; p50/p99

masters: --masters or REDLOCK_MASTERS, comma-separated host:port or
redis:// / rediss:// URLs. --tls-* flags (or rediss:// URLs) speak TLS;
certificates are always verified.

exit codes: 0 ok (exec: the command's own), 64 usage, 69 masters unusable,
75 not acquired, 76 lock lost while the command ran, 1 other failure.
`

// run is the command, with its exit code; main only wires the process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("redlock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	mastersFlag := fs.String("masters", os.Getenv(masters.Env), "comma-separated masters")
	timeout := fs.Duration("timeout", redlock.DefaultTimeout, "per-master timeout")
	tlsCA := fs.String("tls-ca", "", "TLS: the CA bundle (PEM) the masters' certificates must chain to; turns TLS on")
	tlsCert := fs.String("tls-cert", "", "TLS: a client certificate (PEM), with --tls-key")
	tlsKey := fs.String("tls-key", "", "TLS: the client certificate's key (PEM)")
	tlsName := fs.String("tls-server-name", "", "TLS: the name in the masters' certificates (default: each master's host)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	var f func(context.Context, *env, []string) int
	switch cmd {
	case "exec":
		f = cmdExec
	case "status":
		f = cmdStatus
	case "doctor":
		f = cmdDoctor
	case "bench":
		f = cmdBench
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	addrs := masters.Split(*mastersFlag)
	if len(addrs) == 0 {
		fmt.Fprintln(stderr, "redlock: no masters: give --masters or set REDLOCK_MASTERS (comma-separated host:port or redis:// URLs)")
		return exitUsage
	}
	var tlsOpt []pool.Option
	if *tlsCA != "" || *tlsCert != "" || *tlsKey != "" || *tlsName != "" {
		cfg, err := pool.TLSFiles(*tlsCA, *tlsCert, *tlsKey, *tlsName)
		if err != nil {
			fmt.Fprintf(stderr, "redlock: %v\n", err)
			return exitUsage
		}
		tlsOpt = append(tlsOpt, pool.WithTLS(cfg))
	}
	e, err := openEnv(addrs, *timeout, stdout, stderr, tlsOpt...)
	if err != nil {
		fmt.Fprintf(stderr, "redlock: %v\n", err)
		return exitUsage
	}
	defer e.close()
	return f(ctx, e, rest)
}

// env is what every command gets: the masters' pools and a client on them.
type env struct {
	pools   []*pool.RedisPool
	client  *redlock.Client
	timeout time.Duration
	stdout  io.Writer
	stderr  io.Writer
}

func openEnv(addrs []string, timeout time.Duration, stdout, stderr io.Writer, extra ...pool.Option) (*env, error) {
	e := &env{timeout: timeout, stdout: stdout, stderr: stderr}
	for _, a := range addrs {
		var p *pool.RedisPool
		var err error
		opts := append([]pool.Option{pool.WithConnectTimeout(time.Second)}, extra...)
		if strings.Contains(a, "://") {
			p, err = pool.NewFromURL(a, opts...)
		} else {
			p, err = pool.New(a, opts...)
		}
		if err != nil {
			e.close()
			return nil, err
		}
		e.pools = append(e.pools, p)
	}
	c, err := redlock.New(e.poolList(), redlock.WithTimeout(timeout))
	if err != nil {
		e.close()
		return nil, err
	}
	e.client = c
	return e, nil
}

func (e *env) close() {
	if e.client != nil {
		e.client.Close()
	}
	for _, p := range e.pools {
		p.Close()
	}
}

// failCode maps a lock error to an exit code.
func failCode(err error) int {
	switch {
	case errors.Is(err, redlock.ErrInvalid):
		return exitUsage
	case errors.Is(err, redlock.ErrNotAcquired):
		var qe *redlock.QuorumError
		if errors.As(err, &qe) && len(qe.Refused) == 0 && qe.Failed != nil {
			return exitUnavailable // nobody refused: the masters did not answer
		}
		return exitNotAcquired
	default:
		return exitFailure
	}
}
