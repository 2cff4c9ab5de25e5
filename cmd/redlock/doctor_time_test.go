package main

import (
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
)

// A master that stops answering part-way, at its first TIME or during the
// rate sample, is hung: FAIL and counted out, as one that never answers
// is, not healthy with a warning about CONFIG permissions.
func TestDoctor_masterHungDuringClockCheck(t *testing.T) {
	for name, after := range map[string]int64{"at the first TIME": 0, "during the rate sample": 9} {
		t.Run(name, func(t *testing.T) {
			addr := timeMaster(t, func(n int64) string {
				if n > after {
					return "" // no answer: the caller blocks
				}
				now := time.Now()
				return timeReply(strconv.FormatInt(now.Unix(), 10), strconv.Itoa(now.Nanosecond()/1000))
			})
			code, out, errOut := redlockRun(t, []string{addr}, "doctor", "--rate-sample", "200ms")
			if code != exitFailure || !regexp.MustCompile(`(?m)^  FAIL: not answering within [0-9.]+m?s \(hung or overloaded\)$`).MatchString(out) ||
				strings.Contains(out, "CONFIG is not permitted") || !strings.Contains(out, "0 of 1 masters healthy") {
				t.Errorf("exit %d:\n%s%s", code, out, errOut)
			}
		})
	}
}

// timeMaster is a hostile master that is healthy in every way but its
// TIME, which answers reply(n) at the n-th call (nothing, ever, for "").
func timeMaster(t *testing.T, reply func(n int64) string) string {
	t.Helper()
	bulk := func(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }
	var n atomic.Int64
	return hostile.Start(t, func(w io.Writer, cmd []string, quit <-chan struct{}) error {
		var r string
		switch strings.ToUpper(cmd[0]) {
		case "INFO":
			r = bulk("redis_version:7.0.15\r\nrole:master\r\n")
		case "CONFIG":
			r = "*6\r\n" + bulk("appendonly") + bulk("yes") + bulk("appendfsync") + bulk("always") + bulk("maxmemory-policy") + bulk("noeviction")
		case "TIME":
			r = reply(n.Add(1))
		default:
			r = "+PONG\r\n"
		}
		if r == "" {
			<-quit
			return io.EOF
		}
		_, err := io.WriteString(w, r)
		return err
	})
}

func timeReply(secs, usecs string) string {
	return "*2\r\n$" + strconv.Itoa(len(secs)) + "\r\n" + secs + "\r\n$" + strconv.Itoa(len(usecs)) + "\r\n" + usecs + "\r\n"
}

// A master's error reply to TIME is untrusted text: doctor says the clock
// was not read and shows the reply escaped, so terminal escape sequences
// in it cannot act on the terminal.
func TestDoctor_timeErrorIsShownEscaped(t *testing.T) {
	addr := timeMaster(t, func(int64) string { return "-ERR \x1b[2Jcleared \x1b]0;title\x07\r\n" })
	code, out, errOut := redlockRun(t, []string{addr}, "doctor", "--rate-sample", "100ms")
	if code != exitOK || !strings.Contains(out, "  WARN: clock not read: \"ERR \\x1b[2J") {
		t.Errorf("exit %d:\n%s%s", code, out, errOut)
	}
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("doctor printed the master's terminal escapes as they are:\n%q", out)
	}
}

// A clock that runs backwards FAILs, and the error bound of its rate is
// a bound (not negative).
func TestDoctor_clockRunningBackwards(t *testing.T) {
	addr := timeMaster(t, func(n int64) string { return timeReply(strconv.FormatInt(2_000_000_000-n, 10), "0") })
	code, out, errOut := redlockRun(t, []string{addr}, "doctor", "--json", "--rate-sample", "100ms")
	var doc struct {
		Masters []report `json:"masters"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Masters) != 1 {
		t.Fatalf("exit %d, %v:\n%s%s", code, err, out, errOut)
	}
	r := doc.Masters[0]
	if code != exitFailure || r.Verdict != "FAIL" || r.ClockRate == nil || *r.ClockRate >= 0 {
		t.Errorf("exit %d, verdict %s, rate %v:\n%s", code, r.Verdict, r.ClockRate, out)
	}
	if r.ClockRateError == nil || *r.ClockRateError < 0 {
		t.Errorf("clock_rate_error %v, want a bound ≥ 0:\n%s", *r.ClockRateError, out)
	}
}

// TIME answers that are not a time (words, microseconds out of range)
// give no clock offset: the offset check reads TIME as the rate check
// does, rather than reporting a clock decades off.
func TestDoctor_timeNotATimeGivesNoOffset(t *testing.T) {
	for name, reply := range map[string]string{
		"words":           timeReply("soon", "later"),
		"usecs too large": timeReply("1700000000", "99999999999"),
		"one value":       "*1\r\n$10\r\n1700000000\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			addr := timeMaster(t, func(int64) string { return reply })
			code, out, errOut := redlockRun(t, []string{addr}, "doctor", "--rate-sample", "100ms")
			if strings.Contains(out, "off the local clock") {
				t.Errorf("exit %d: an offset from a TIME that is no time:\n%s%s", code, out, errOut)
			}
			if !strings.Contains(out, "TIME answered") {
				t.Errorf("exit %d: doctor does not say TIME answered no time:\n%s%s", code, out, errOut)
			}
		})
	}
}
