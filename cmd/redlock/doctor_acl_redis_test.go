package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// doctor --key runs what locks send on a probe beside the key with the
// lock user's credentials: the minimal ACL of docs/operations.md passes,
// one without +pexpire FAILs naming the extension script, and the probe
// keys are gone afterwards.
func TestDoctor_keyChecksTheLockUsersACL(t *testing.T) {
	s := redistest.StartOne(t)
	const rules = "on >pw resetkeys ~lock:* ~{lock:* resetchannels &quorumlock:released:lock:* -@all " +
		"+ping +info +time +set +get +del +exists +pexpire +pttl +publish +hset +hgetall +evalsha +eval +script|load"
	setUser := func(name, rules string) string {
		t.Helper()
		args := []any{"SETUSER", name, "reset"}
		for _, r := range strings.Fields(rules) {
			args = append(args, r)
		}
		if _, err := s.Do("ACL", args...); err != nil {
			t.Fatal(err)
		}
		return "redis://" + name + ":pw@" + s.Addr()
	}
	ok := setUser("locker", rules)
	code, out, errOut := redlockRun(t, []string{ok}, "doctor", "--rate-sample", "0", "--key", "lock:job")
	if strings.Contains(out, "ACL") || code == exitFailure {
		t.Errorf("the minimal ACL: exit %d:\n%s%s", code, out, errOut)
	}
	short := setUser("short", strings.Replace(rules, " +pexpire", "", 1))
	code, out, _ = redlockRun(t, []string{short}, "doctor", "--rate-sample", "0", "--key", "lock:job")
	if code != exitFailure || !strings.Contains(out, "the ACL refuses") || !strings.Contains(out, "the extension script") {
		t.Errorf("an ACL without +pexpire: exit %d:\n%s", code, out)
	}
	if n, _ := s.Do("DBSIZE"); n != int64(0) {
		t.Errorf("the probe left %v keys", n)
	}
}

// doctor --key says on how many masters the key's lock is: after a
// master restarted empty, it tolerates one failure fewer than the
// masters' health says.
func TestDoctor_keyReportsALockMissingOnARestartedMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)
	_, l := holdLock(t, masters, "job")
	// Acquire returns at a quorum: on a busy machine a third SET may have
	// timed out. Put the lock there too; what is tested is doctor.
	redistest.HoldEverywhere(t, servers, l.Key(), l.Token(), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !redistest.WaitFor(ctx, func() bool {
		_, out, _ := redlockRun(t, masters, "doctor", "--rate-sample", "0", "--key", "job")
		return strings.Contains(out, "lock job held on 3 of 3 masters; it tolerates 1 more failure")
	}) {
		t.Fatal("doctor does not report the lock on every master")
	}
	if err := servers[1].Restart(); err != nil {
		t.Fatal(err)
	}
	_, out, _ := redlockRun(t, masters, "doctor", "--rate-sample", "0", "--key", "job")
	if !strings.Contains(out, "lock job held on 2 of 3 masters, missing on 1 that answered") ||
		!strings.Contains(out, "it tolerates 0 more failures") {
		t.Errorf("doctor after a restart:\n%s", out)
	}
}
