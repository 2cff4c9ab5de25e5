package resp_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/resp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBulk_bytesAndStringsOnly(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
		ok   bool
	}{
		{[]byte("tok"), "tok", true},
		{"tok", "tok", true},
		{[]byte{}, "", true},
		{int64(1), "", false},
		{nil, "", false},
		{[]any{[]byte("tok")}, "", false},
	} {
		if got, ok := resp.Bulk(c.v); got != c.want || ok != c.ok {
			t.Errorf("Bulk(%#v) = %q, %v; want %q, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

// Shape never quotes a reply's bytes: a master's reply may carry anything.
func TestShape_neverTheBytes(t *testing.T) {
	secret := "s3cret-token"
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, "nil"},
		{int64(42), "an integer"},
		{secret, "a string of 12 bytes"},
		{[]byte(secret), "a bulk string of 12 bytes"},
		{[]any{[]byte(secret), int64(1)}, "an array of 2 elements"},
		{map[string]any{secret: secret}, "a map[string]interface {}"},
	} {
		got := resp.Shape(c.v)
		if got != c.want || strings.Contains(got, secret) {
			t.Errorf("Shape(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
}
