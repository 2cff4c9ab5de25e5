package keys

import "testing"

func TestCompanion(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"orders", "{orders}:x"},
		{"{user1}:orders", "{user1}:orders:x"},
		{"a{b}c", "a{b}c:x"},
		{"a{b", "{a{b}:x"},
		{"with space", "{with space}:x"},
	} {
		if got := Companion(tc.key, ":x"); got != tc.want {
			t.Errorf("Companion(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}
