package inspect

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/layout"
)

// maxFence is the core's bound on fencing tokens (redlock's fence.go).
const maxFence = 1 << 53

// A holder read's reply is untrusted: anything but the script's shapes
// within its bounds is malformed, never a panic.
func TestParseHolderRead_refusesWhatTheScriptNeverSends(t *testing.T) {
	long := func(n int) []byte { return make([]byte, n) }
	ok := []any{[]byte("tok"), int64(1500), []byte("42"), []byte("v")}
	want := layout.Holder{Mode: layout.ModeExclusive, Token: "tok", TTL: 1500 * time.Millisecond, Fence: 42, Meta: "v"}
	if st, err := parseHolderRead(ok, maxFence); err != nil || st.Kind != layout.KindLock || st.TTL != want.TTL || len(st.Holders) != 1 || st.Holders[0] != want {
		t.Fatalf("parse = %+v, %v", st, err)
	}
	if st, err := parseHolderRead([]any{}, maxFence); err != nil || st.Kind != layout.KindFree || len(st.Holders) != 0 {
		t.Fatalf("parse of {} = %+v, %v", st, err)
	}
	if st, err := parseHolderRead([]any{"tok", int64(-1), nil, nil}, maxFence); err != nil || st.TTL != layout.NoExpiry ||
		len(st.Holders) != 1 || st.Holders[0].TTL != layout.NoExpiry || st.Holders[0].Fence != 0 {
		t.Fatalf("parse of a key without TTL = %+v, %v", st, err)
	}
	for _, v := range []any{
		nil, int64(1), "x", []any{[]byte("tok")},
		[]any{nil, int64(1), nil, nil},
		[]any{[]byte(""), int64(1), nil, nil},
		[]any{long(maxToken + 1), int64(1), nil, nil},
		[]any{[]byte("tok"), "1", nil, nil},
		[]any{[]byte("tok"), int64(-3), nil, nil},
		[]any{[]byte("tok"), int64(1), []byte("0"), nil},
		[]any{[]byte("tok"), int64(1), []byte("007"), nil},
		[]any{[]byte("tok"), int64(1), []byte("-1"), nil},
		[]any{[]byte("tok"), int64(1), []byte("9007199254740992"), nil},
		[]any{[]byte("tok"), int64(1), []byte("99999999999999999999999"), nil},
		[]any{[]byte("tok"), int64(1), int64(5), nil},
		[]any{[]byte("tok"), int64(1), nil, long(layout.MaxMeta + 1)},
		[]any{[]byte("tok"), int64(1), nil, []any{}},
		errors.New("ERR boom"),
	} {
		if st, err := parseHolderRead(v, maxFence); err == nil {
			t.Errorf("parse(%v) = %+v, want an error", v, st)
		}
	}
}
