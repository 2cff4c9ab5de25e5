// Command redlock operates quorumlock locks from the shell.
//
//	redlock [global flags] exec [flags] KEY -- COMMAND [ARGS...]
//	redlock [global flags] status [--json] KEY...
//	redlock [global flags] doctor [--json]
//	redlock [global flags] bench [flags]
//	redlock --version | --help | help [COMMAND]
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
// A member may be a Redis Cluster, given by its seed nodes as
// cluster://HOST:PORT[+HOST:PORT...]: exec, elect, leader and bench lock on
// the node that owns the key's slot (the library's cluster transport);
// status and doctor report the nodes.
//
// Exit codes: 0 success (exec: the command's own code is passed through;
// 128+n when it died of signal n), 64 bad usage, 69 masters unusable,
// 75 the lock was not acquired (exec), 76 the lock was lost while the
// command ran (exec; the command was terminated), 1 other failures
// (doctor: a master needs attention). --help, -h and help print the usage
// on stdout and exit 0, for the tool and for each command (without
// masters); --version prints the module's version.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
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
       redlock --version | --help | help [COMMAND]

commands:
  exec [--ttl D] [--wait D] [--grace D] [--fence] KEY -- COMMAND [ARGS...]
         run COMMAND while holding the lock on KEY
  elect --value ID [--ttl D] [--grace D] KEY -- COMMAND [ARGS...]
         campaign in the election on KEY; run COMMAND only while leader
  leader [--json] KEY
         the current leader of the election on KEY and its term
  status [--json] KEY...
         per master: reachable, holder, remaining TTL, fence counter, holds
  doctor [--json]
         per master: version, role, persistence, eviction, clock, round trip
  bench [--duration D] [--clients N] [--key K]
         acquire+release as fast as possible; p50/p99

"redlock COMMAND --help" describes a command's flags.

masters: --masters or REDLOCK_MASTERS, comma-separated host:port or
redis:// / rediss:// URLs. --tls-* flags (or rediss:// URLs) speak TLS;
certificates are always verified. A member may be a Redis Cluster:
cluster://HOST:PORT[+HOST:PORT...] (its seed nodes, no credentials in it;
the --tls-* flags apply to every node).

exit codes: 0 ok (exec: the command's own), 64 usage, 69 masters unusable,
75 not acquired, 76 lock lost while the command ran, 1 other failure.
`

// runner is a command whose arguments were parsed: it runs on the masters.
type runner func(ctx context.Context, e *env) int

// usageError is a command line that is wrong: the message says how.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// command parses a command's arguments. It returns flag.ErrHelp for
// --help, a usageError (or the flag package's error) for a bad command
// line, and else what to run.
type command struct {
	parse func(args []string) (runner, error)
	usage func() string // the command's help, flags included
}

func commands() map[string]command {
	return map[string]command{
		"exec":   {parse: parseExec, usage: execUsage},
		"elect":  {parse: parseElect, usage: electUsage},
		"leader": {parse: parseLeader, usage: leaderUsage},
		"doctor": {parse: parseDoctor, usage: doctorUsage},
		"bench":  {parse: parseBench, usage: benchUsage},
		"status": {parse: parseStatus, usage: statusUsage},
	}
}

// flagUsage is a command's usage line followed by its flags' defaults.
func flagUsage(fs *flag.FlagSet, line string) string {
	var b strings.Builder
	b.WriteString(line)
	b.WriteString("\n\nflags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}

// newFlagSet is a flag set that prints nothing itself: run reports its
// errors and usage.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// run is the command, with its exit code; main only wires the process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("redlock")
	mastersFlag := fs.String("masters", os.Getenv(masters.Env), "comma-separated masters")
	timeout := fs.Duration("timeout", redlock.DefaultTimeout, "per-master timeout")
	tlsCA := fs.String("tls-ca", "", "TLS: the CA bundle (PEM) the masters' certificates must chain to; turns TLS on")
	tlsCert := fs.String("tls-cert", "", "TLS: a client certificate (PEM), with --tls-key")
	tlsKey := fs.String("tls-key", "", "TLS: the client certificate's key (PEM)")
	tlsName := fs.String("tls-server-name", "", "TLS: the name in the masters' certificates (default: each master's host)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		fmt.Fprintf(stderr, "redlock: %v\n\n%s", err, usage)
		return exitUsage
	}
	if *version {
		fmt.Fprintln(stdout, "redlock", versionString(debug.ReadBuildInfo()))
		return exitOK
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "redlock: no command given\n\n%s", usage)
		return exitUsage
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	cmds := commands()
	if name == "help" {
		if len(rest) > 0 {
			if c, ok := cmds[rest[0]]; ok {
				fmt.Fprint(stdout, c.usage())
				return exitOK
			}
			fmt.Fprintf(stderr, "redlock: unknown command %q\n\n%s", rest[0], usage)
			return exitUsage
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	c, ok := cmds[name]
	if !ok {
		fmt.Fprintf(stderr, "redlock: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}
	f, err := c.parse(rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, c.usage())
			return exitOK
		}
		fmt.Fprintf(stderr, "redlock %s: %v\n\n%s", name, err, c.usage())
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
			printErr(stderr, err)
			return exitUsage
		}
		tlsOpt = append(tlsOpt, pool.WithTLS(cfg))
	}
	e, err := openEnv(addrs, *timeout, stdout, stderr, tlsOpt...)
	if err != nil {
		printErr(stderr, err)
		return exitUsage
	}
	defer e.close()
	return f(ctx, e)
}

// printErr prints err on a line of its own, prefixed "redlock: " once
// (the library's errors already start with it).
func printErr(w io.Writer, err error) {
	msg := err.Error()
	if !strings.HasPrefix(msg, "redlock: ") {
		msg = "redlock: " + msg
	}
	fmt.Fprintln(w, msg)
}

// versionString is the module's version from the build information:
// its tag ("v0.3.0"), or "(devel)" with the VCS revision (and
// "+modified" for a work tree with changes) when built from a checkout.
func versionString(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "(unknown: built without module information)"
	}
	v := bi.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	v = "(devel)"
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev != "" {
		v += " " + rev + modified
	}
	return v
}

// env is what every command gets: the masters' pools and a client on them.
type env struct {
	// pools are the members' pools, in --masters order; nil for a member
	// that is a Redis Cluster, which clusters holds at the same index.
	pools    []*pool.RedisPool
	clusters []*clusterMember
	// client is a client of the members: on pools, or when a member is a
	// cluster, made by redigo.NewFromAddrs (with pools of its own).
	client *redlock.Client
	addrs  []string      // --masters
	opts   []pool.Option // every pool's options
	// anyCluster: a member is a Redis Cluster.
	anyCluster bool
	timeout    time.Duration
	stdout     io.Writer
	stderr     io.Writer
	// isTerminal tells whether a writer is a terminal (bench draws its
	// progress bar only there); tests replace it.
	isTerminal func(io.Writer) bool
}

func openEnv(addrs []string, timeout time.Duration, stdout, stderr io.Writer, extra ...pool.Option) (*env, error) {
	opts := append([]pool.Option{pool.WithConnectTimeout(time.Second)}, extra...)
	e := &env{timeout: timeout, stdout: stdout, stderr: stderr, isTerminal: isTerminal, addrs: addrs, opts: opts}
	anyCluster := false
	for _, a := range addrs {
		var p *pool.RedisPool
		var err error
		if strings.HasPrefix(a, clusterScheme) {
			cm, err := parseClusterMember(a, opts)
			if err != nil {
				e.close()
				return nil, err
			}
			e.pools, e.clusters = append(e.pools, nil), append(e.clusters, cm)
			anyCluster = true
			continue
		}
		if strings.Contains(a, "://") {
			p, err = pool.NewFromURL(a, opts...)
		} else {
			p, err = pool.New(a, opts...)
		}
		if err != nil {
			e.close()
			return nil, err
		}
		e.pools, e.clusters = append(e.pools, p), append(e.clusters, nil)
	}
	e.anyCluster = anyCluster
	c, err := e.newClient(timeout)
	if err != nil {
		e.close()
		return nil, err
	}
	e.client = c
	return e, nil
}

// newClient returns a client of the members with the per-master timeout
// given: on the members' pools, or when a member is a Redis Cluster, made
// by redlock.NewFromAddrs (its cluster transport follows the slots). The
// caller closes it.
func (e *env) newClient(timeout time.Duration) (*redlock.Client, error) {
	if e.anyCluster {
		return redigo.NewFromAddrs(e.addrs, redlock.WithTimeout(timeout), redigo.WithPoolOptions(e.opts...))
	}
	return redigo.New(e.poolList(), redlock.WithTimeout(timeout))
}

func (e *env) close() {
	if e.client != nil {
		e.client.Close()
	}
	for i, p := range e.pools {
		if p != nil {
			p.Close()
		}
		if i < len(e.clusters) && e.clusters[i] != nil {
			e.clusters[i].close()
		}
	}
}

// name is member i as --masters gave it (a cluster member's seeds).
func (e *env) name(i int) string {
	if e.clusters[i] != nil {
		return e.clusters[i].spec
	}
	return e.pools[i].Addr()
}

// failCode maps a lock error to an exit code.
func failCode(err error) int {
	switch {
	case errors.Is(err, redlock.ErrInvalid):
		return exitUsage
	case errors.Is(err, redlock.ErrWrongKind):
		return exitNotAcquired // held by a lock of another kind
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
