package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/redlock"
)

const electLine = "usage: redlock elect --value ID [--ttl D] [--grace D] KEY -- COMMAND [ARGS...]\n\n" +
	"Campaigns in the election on KEY with ID as its value, waits until elected\n" +
	"(or interrupted), then runs COMMAND while leader, with QUORUMLOCK_KEY=KEY,\n" +
	"QUORUMLOCK_TERM=the leader's term (a fencing token) and QUORUMLOCK_VALUE=ID\n" +
	"in its environment. When leadership is lost, COMMAND gets SIGTERM, then\n" +
	"SIGKILL after --grace, and redlock exits 76; when COMMAND exits, redlock\n" +
	"resigns (the next candidate takes over at once) and exits with its code.\n" +
	"A leader that freezes or dies is replaced within --ttl (plus up to 2s)."

type electFlags struct {
	fs         *flag.FlagSet
	value      *string
	ttl, grace *time.Duration
}

func newElectFlags() *electFlags {
	fs := newFlagSet("elect")
	return &electFlags{
		fs:    fs,
		value: fs.String("value", "", "this candidate's value, shown by `redlock leader` (its address, say); required"),
		ttl:   fs.Duration("ttl", 10*time.Second, "the leader's lock's time to live; it is extended every ttl/3"),
		grace: fs.Duration("grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL"),
	}
}

func electUsage() string { return flagUsage(newElectFlags().fs, electLine) }

// parseElect parses elect's command line: flags, KEY, "--", COMMAND.
func parseElect(args []string) (runner, error) {
	f := newElectFlags()
	if err := f.fs.Parse(args); err != nil {
		return nil, err
	}
	key, command, err := keyAndCommand(f.fs.Args())
	if err != nil {
		return nil, err
	}
	switch {
	case *f.value == "":
		return nil, usageError{"--value is required: what `redlock leader` shows for this candidate"}
	case *f.grace < 0:
		return nil, usageError{"--grace must not be negative"}
	}
	return func(ctx context.Context, e *env) int {
		return cmdElect(ctx, e, key, *f.value, command, *f.ttl, *f.grace)
	}, nil
}

// cmdElect campaigns, then runs the command while leader.
func cmdElect(ctx context.Context, e *env, key, value string, command []string, ttl, grace time.Duration) int {
	el, err := election.New(e.client, key, election.WithTTL(ttl))
	if err != nil {
		printErr(e.stderr, err)
		return failCode(err)
	}
	ld, err := el.Campaign(ctx, value)
	if err != nil {
		printErr(e.stderr, err)
		return failCode(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+2*e.timeout)
		defer cancel()
		if err := ld.Resign(rctx); err != nil && !errors.Is(err, redlock.ErrNotHeld) {
			printErr(e.stderr, err)
		}
	}()
	vars := []string{"QUORUMLOCK_KEY=" + key, "QUORUMLOCK_TERM=" + strconv.FormatUint(ld.Term(), 10), "QUORUMLOCK_VALUE=" + value}
	return runHeld(ctx, e, ld.Lock(), "leadership of "+strconv.Quote(key)+" lost", command, vars, grace)
}

const leaderLine = "usage: redlock leader [--json] KEY\n\n" +
	"Prints the current leader of the election on KEY: its value and term, and\n" +
	"how long the masters keep it without an extension. Exits 0 with a leader,\n" +
	"75 when there is none, 69 when too few masters answered to tell."

func newLeaderFlags() (*flag.FlagSet, *bool) {
	fs := newFlagSet("leader")
	return fs, fs.Bool("json", false, `print {"value":…,"term":…,"ttl_ms":…} instead`)
}

func leaderUsage() string { fs, _ := newLeaderFlags(); return flagUsage(fs, leaderLine) }

func parseLeader(args []string) (runner, error) {
	fs, asJSON := newLeaderFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 1 {
		return nil, usageError{"give one KEY"}
	}
	key := fs.Arg(0)
	return func(ctx context.Context, e *env) int { return cmdLeader(ctx, e, key, *asJSON) }, nil
}

// cmdLeader prints the election's leader.
func cmdLeader(ctx context.Context, e *env, key string, asJSON bool) int {
	c := e.client
	if e.timeout < statusTimeout {
		var err error
		if c, err = e.newClient(statusTimeout); err != nil {
			printErr(e.stderr, err)
			return exitUsage
		}
		defer c.Close()
	}
	el, err := election.New(c, key)
	if err != nil {
		printErr(e.stderr, err)
		return failCode(err)
	}
	ld, err := el.Leader(ctx)
	switch {
	case errors.Is(err, election.ErrHandOver): // a new leader's term is not on a quorum yet: no pair to tell
		if asJSON {
			fmt.Fprintln(e.stdout, "null")
		} else {
			fmt.Fprintf(e.stdout, "no settled leader of %s (hand-over in progress)\n", display(key))
		}
		return exitNotAcquired
	case errors.Is(err, election.ErrNoLeader):
		if asJSON {
			fmt.Fprintln(e.stdout, "null")
		} else {
			fmt.Fprintf(e.stdout, "no leader of %s\n", display(key))
		}
		return exitNotAcquired
	case err != nil:
		printErr(e.stderr, errors.New(display(err.Error())))
		return exitUnavailable
	}
	if asJSON {
		b, _ := json.Marshal(struct {
			Value string `json:"value"`
			Term  uint64 `json:"term"`
			TTLms int64  `json:"ttl_ms"`
		}{ld.Value, ld.Term, ld.TTL.Milliseconds()})
		fmt.Fprintln(e.stdout, string(b))
		return exitOK
	}
	fmt.Fprintf(e.stdout, "leader of %s: %s (term %d, expires in %v unless extended)\n",
		display(key), display(ld.Value), ld.Term, ld.TTL.Round(time.Millisecond))
	return exitOK
}
