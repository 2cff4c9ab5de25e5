package redlock

import (
	"testing"
)

// FuzzDecode: whatever a master answers, decoding gives exactly one of
// yes, no, or a failure with an error; never a panic. A fenced
// acquisition's counter is accepted only as a decimal below 2^53.
func FuzzDecode(f *testing.F) {
	f.Add(uint8(0), uint8(1), "OK", int64(0))
	f.Add(uint8(0), uint8(3), "41", int64(1))
	f.Add(uint8(1), uint8(4), "", int64(1))
	f.Add(uint8(2), uint8(5), "NOSCRIPT No matching script", int64(0))
	f.Add(uint8(0), uint8(3), "9007199254740992", int64(0))
	f.Add(uint8(0), uint8(6), "x", int64(-1))
	f.Fuzz(func(t *testing.T, op, kind uint8, s string, n int64) {
		var reply any
		switch kind % 7 {
		case 0:
			reply = nil
		case 1:
			reply = "OK"
		case 2:
			reply = s // a status reply
		case 3:
			reply = []byte(s)
		case 4:
			reply = n
		case 5:
			reply = ReplyError(s)
		default:
			reply = []any{[]byte(s), n}
		}
		o := opKind(op % 8)
		want := expect(op / 8 % 6) // including 0, which nothing fits
		var err error
		if e, ok := reply.(ReplyError); ok {
			reply, err = nil, e
		}
		r := &round{counters: make([]uint64, 1)}
		v, derr := r.decode(0, o, want, reply, err)
		switch {
		case v == voteFail && derr == nil:
			t.Fatalf("decode(%v, %#v) failed without an error", o, reply)
		case v != voteFail && derr != nil:
			t.Fatalf("decode(%v, %#v) = %v with error %v", o, reply, v, derr)
		case v != voteYes && v != voteNo && v != voteFail:
			t.Fatalf("decode(%v, %#v) = vote %d", o, reply, v)
		}
		if r.counters[0] >= maxFence {
			t.Fatalf("decode(%v, %#v) took counter %d", o, reply, r.counters[0])
		}
	})
}
