package layout_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/layout"
)

const secret = "\x1b]0;s3cret\a"

// probe is a well-formed first round trip for a string lock.
func probe() []any {
	return []any{
		[]any{[]byte("1700000000"), []byte("123456")}, // TIME
		"string",    // TYPE
		int64(9000), // PTTL
		nil,         // GET fence
		int64(0),    // ZCARD
		[]any{},     // ZRANGE queue
		[]any{},     // ZRANGE deadlines
		int64(0),    // EXISTS meta
	}
}

func with(replies []any, i int, v any) []any {
	out := append([]any(nil), replies...)
	out[i] = v
	return out
}

// A reply of another shape than its command allows ends the reading with
// ErrMalformed, names no byte the master sent, and never panics.
func TestReader_Feed_hostileReplies(t *testing.T) {
	big := make([]any, 2*layout.MaxEntries+2)
	for i := range big {
		big[i] = []byte("1")
	}
	for name, replies := range map[string][]any{
		"TIME not an array":          with(probe(), 0, []byte(secret)),
		"TIME of three":              with(probe(), 0, []any{[]byte("1"), []byte("2"), []byte("3")}),
		"TIME not decimal":           with(probe(), 0, []any{[]byte(secret), []byte("1")}),
		"TIME micro out of range":    with(probe(), 0, []any{[]byte("1"), []byte("1000000")}),
		"TIME seconds overflow":      with(probe(), 0, []any{[]byte("999999999999999999"), []byte("1")}),
		"TYPE a bulk of many bytes":  with(probe(), 1, strings.Repeat("x", 100)),
		"TYPE an integer":            with(probe(), 1, int64(1)),
		"PTTL a string":              with(probe(), 2, secret),
		"PTTL below -2":              with(probe(), 2, int64(-3)),
		"fence not decimal":          with(probe(), 3, []byte(secret)),
		"fence signed":               with(probe(), 3, []byte("-1")),
		"fence beyond uint64":        with(probe(), 3, []byte("99999999999999999999")),
		"fence an array":             with(probe(), 3, []any{}),
		"ZCARD negative":             with(probe(), 4, int64(-1)),
		"queue odd":                  with(probe(), 5, []any{[]byte("w")}),
		"queue score not a number":   with(probe(), 5, []any{[]byte("w"), []byte(secret)}),
		"queue score NaN":            with(probe(), 5, []any{[]byte("w"), []byte("nan")}),
		"queue score huge":           with(probe(), 5, []any{[]byte("w"), []byte("1e300")}),
		"queue too long":             with(probe(), 5, big),
		"deadlines member an array":  with(probe(), 6, []any{[]any{}, []byte("1")}),
		"too few replies":            probe()[:3],
		"EXISTS a string":            with(probe(), 7, []byte(secret)),
		"a reply of an unknown type": with(probe(), 4, 3.5),
	} {
		t.Run(name, func(t *testing.T) {
			r := layout.NewReader("k")
			r.Next()
			err := r.Feed(replies)
			if !errors.Is(err, layout.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error quotes the master: %v", err)
			}
			if r.Next() != nil || !errors.Is(r.Err(), layout.ErrMalformed) {
				t.Fatal("the reading went on after a malformed reply")
			}
		})
	}
}

func TestReader_Feed_laterSteps(t *testing.T) {
	hashProbe := with(probe(), 1, "hash")
	metaProbe := with(probe(), 7, int64(1))
	for name, tc := range map[string]struct {
		probe []any
		steps [][]any
		bad   bool
		kind  layout.Kind
	}{
		"token too long":       {probe(), [][]any{{int64(1), []byte(strings.Repeat("t", layout.MaxValue+1))}}, true, 0},
		"STRLEN a string":      {probe(), [][]any{{"1", []byte("t")}}, true, 0},
		"HLEN a bulk":          {hashProbe, [][]any{{[]byte("1")}}, true, 0},
		"HGETALL odd":          {hashProbe, [][]any{{int64(1)}, {[]any{[]byte("a")}}}, true, 0},
		"HGETALL nil":          {hashProbe, [][]any{{int64(1)}, {nil}}, true, 0},
		"HGETALL field array":  {hashProbe, [][]any{{int64(1)}, {[]any{[]any{}, []byte("1")}}}, true, 0},
		"HSCAN not a pair":     {hashProbe, [][]any{{int64(layout.MaxEntries + 1)}, {[]any{[]byte("0")}}}, true, 0},
		"reentrant":            {hashProbe, [][]any{{int64(1)}, {[]any{[]byte("owner"), []byte("3")}}}, false, layout.KindReentrant},
		"reentrant hold id":    {hashProbe, [][]any{{int64(2)}, {[]any{[]byte(""), []byte("h1"), []byte("owner"), []byte("3")}}}, false, layout.KindReentrant},
		"hold id alone":        {hashProbe, [][]any{{int64(1)}, {[]any{[]byte(""), []byte("h1")}}}, false, layout.KindForeign},
		"count with a sign":    {hashProbe, [][]any{{int64(1)}, {[]any{[]byte("owner"), []byte("+3")}}}, false, layout.KindForeign},
		"count zero":           {hashProbe, [][]any{{int64(1)}, {[]any{[]byte("owner"), []byte("0")}}}, false, layout.KindForeign},
		"expiry not a number":  {hashProbe, [][]any{{int64(1)}, {[]any{[]byte("r:x"), []byte(secret)}}}, false, layout.KindForeign},
		"expiry overflows":     {hashProbe, [][]any{{int64(1)}, {[]any{[]byte("r:x"), []byte("9999999999999999999")}}}, false, layout.KindForeign},
		"error reply":          {probe(), [][]any{{errors.New("ERR " + secret), []byte("t")}}, true, 0},
		"vanished after TYPE":  {with(probe(), 2, int64(-2)), nil, false, layout.KindFree},
		"another type":         {with(probe(), 1, "stream"), nil, false, layout.KindForeign},
		"empty hash read back": {hashProbe, [][]any{{int64(0)}}, false, layout.KindFree},
		"metadata":             {metaProbe, [][]any{{int64(1), []byte("t")}, {[]any{[]byte("host=a")}}}, false, layout.KindLock},
		"metadata absent":      {metaProbe, [][]any{{int64(1), []byte("t")}, {[]any{nil}}}, false, layout.KindLock},
		"metadata too many":    {metaProbe, [][]any{{int64(1), []byte("t")}, {[]any{nil, nil}}}, true, 0},
		"metadata an integer":  {metaProbe, [][]any{{int64(1), []byte("t")}, {[]any{int64(1)}}}, true, 0},
		"metadata not array":   {metaProbe, [][]any{{int64(1), []byte("t")}, {[]byte(secret)}}, true, 0},
	} {
		t.Run(name, func(t *testing.T) {
			r := layout.NewReader("k")
			r.Next()
			if err := r.Feed(tc.probe); err != nil {
				t.Fatal(err)
			}
			var err error
			for _, step := range tc.steps {
				if r.Next() == nil {
					t.Fatal("no more commands")
				}
				if err = r.Feed(step); err != nil {
					break
				}
			}
			if tc.bad {
				if err == nil || r.Err() == nil {
					t.Fatalf("accepted: %+v", r.State())
				}
				if strings.Contains(err.Error(), "s3cret") && !strings.Contains(name, "error reply") {
					t.Fatalf("the error quotes the master: %v", err)
				}
				return
			}
			if err != nil || r.Next() != nil {
				t.Fatalf("err %v, or the reading is not complete", err)
			}
			if st := r.State(); st.Kind != tc.kind {
				t.Fatalf("kind %v, want %v: %+v", st.Kind, tc.kind, st)
			}
		})
	}
}

// A holder's metadata is read in a fourth round trip, only when the
// metadata hash exists, and cut at MaxMeta.
func TestReader_Feed_metadata(t *testing.T) {
	r := layout.NewReader("k")
	r.Next()
	if err := r.Feed(with(probe(), 7, int64(1))); err != nil {
		t.Fatal(err)
	}
	r.Next()
	if err := r.Feed([]any{int64(1), []byte("tok")}); err != nil {
		t.Fatal(err)
	}
	cmds := r.Next()
	if len(cmds) != 1 || cmds[0].Name != "HMGET" || len(cmds[0].Args) != 2 || cmds[0].Args[0] != layout.MetaKey("k") || cmds[0].Args[1] != "tok" {
		t.Fatalf("%+v", cmds)
	}
	if err := r.Feed([]any{[]any{[]byte(strings.Repeat("m", layout.MaxMeta+5))}}); err != nil {
		t.Fatal(err)
	}
	if r.Next() != nil {
		t.Fatal("a fifth round trip")
	}
	if st := r.State(); len(st.Holders[0].Meta) != layout.MaxMeta || !st.Truncated {
		t.Fatalf("%d bytes of metadata, truncated %v", len(st.Holders[0].Meta), st.Truncated)
	}
}

// FuzzReader: whatever a master sends, a Reader ends in at most three
// round trips, never panics and keeps within its bounds.
func FuzzReader(f *testing.F) {
	f.Add("string", int64(9000), []byte("tok"), int64(3), []byte("r:a"), []byte("17"))
	f.Add("hash", int64(-1), []byte("0"), int64(2000), []byte("owner"), []byte("2"))
	f.Add("hash", int64(5), []byte("x"), int64(1), []byte("intent"), []byte("w"))
	f.Fuzz(func(t *testing.T, typ string, pttl int64, b []byte, n int64, field, value []byte) {
		r := layout.NewReader("k")
		replies := [][]any{
			with(with(with(probe(), 1, typ), 2, pttl), 3, b),
			{n, b},
			{[]any{field, value, b, value}},
		}
		for i := 0; r.Next() != nil; i++ {
			if i == 3 {
				t.Fatal("a fourth round trip")
			}
			step := replies[i]
			if len(r.Next()) != len(step) {
				step = step[:1]
			}
			if r.Feed(step) != nil {
				return
			}
		}
		st := r.State()
		if len(st.Holders) > layout.MaxEntries || len(st.Queue) > layout.MaxEntries {
			t.Fatalf("%d holders, %d waiters", len(st.Holders), len(st.Queue))
		}
		for _, h := range st.Holders {
			if len(h.Token) > layout.MaxValue {
				t.Fatalf("a token of %d bytes", len(h.Token))
			}
		}
	})
}
