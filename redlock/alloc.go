package redlock

// The allocation tricks of the core, each kept because
// BenchmarkAcquireRelease (bench_test.go; pipelined, N=5, -benchmem) shows
// what it buys per lock and unlock, two rounds:
//
//   - a round and its legs are one allocation (newRound, below): without
//     it, each round allocates its legs apart: 58 allocs/op instead of 56
//     (it costs some 250 bytes/op: round5 is rounded up to a size class);
//   - a round holds its command (round.wireBuf) and the command's
//     arguments (round.argBuf, room for twelve) in that allocation
//     (round.wireInto): without it, 58 allocs/op instead of 56, and some
//     300 bytes/op more.
//
// Anything else allocates plainly.

// Rounds of one, three and five masters (the sizes the benchmark runs)
// are one allocation with their legs, of the smallest of these sizes that
// holds every master's leg (a leg is some 300 bytes: holding five for
// three masters would cost two for nothing on every round). More masters
// take a second allocation for the legs.
type (
	round1 struct {
		round
		legs [1]leg
	}
	round3 struct {
		round
		legs [3]leg
	}
	round5 struct {
		round
		legs [5]leg
	}
)

// newRound returns a zero round whose legs are n zero legs.
func newRound(n int) *round {
	switch {
	case n <= 1:
		x := new(round1)
		x.round.legs = x.legs[:n]
		return &x.round
	case n <= 3:
		x := new(round3)
		x.round.legs = x.legs[:n]
		return &x.round
	case n <= 5:
		x := new(round5)
		x.round.legs = x.legs[:n]
		return &x.round
	}
	r := new(round)
	r.legs = make([]leg, n)
	return r
}
