package cluster_test

import (
	"fmt"
	"strings"
	"testing"
)

// fatalRecorder records the message of Fatal instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(f)
}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
