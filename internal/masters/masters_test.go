package masters

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for in, want := range map[string][]string{
		"":                           nil,
		" , ,":                       nil,
		"a:1":                        {"a:1"},
		" a:1 ,b:2,, redis://c:3/0 ": {"a:1", "b:2", "redis://c:3/0"},
	} {
		if got := Split(in); !slices.Equal(got, want) {
			t.Errorf("Split(%q) = %q, want %q", in, got, want)
		}
	}
}
