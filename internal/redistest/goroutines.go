package redistest

import (
	"bytes"
	"runtime"
)

// Goroutines counts the goroutines of this process whose state begins
// with state ("IO wait": blocked in a read or write of a socket; "" for
// any) and whose stacks name every one of frames (substrings of a frame,
// such as "(*PubSubConn).ReceiveWithTimeout(" or a test's name). Polled
// with Eventually, it is how a test waits for a goroutine to have got to
// a call, or to block in it, where nothing else shows that: not a sleep
// that hopes it got there. It looks at every goroutine of the process, so
// frames should name what only the test's goroutines run.
func Goroutines(state string, frames ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		// "goroutine 7 [IO wait, 2 minutes]:", then the stack.
		header, stack, _ := bytes.Cut(g, []byte("\n"))
		open := bytes.IndexByte(header, '[')
		if open < 0 || !bytes.HasPrefix(header[open+1:], []byte(state)) {
			continue
		}
		all := true
		for _, f := range frames {
			if !bytes.Contains(stack, []byte(f)) {
				all = false
				break
			}
		}
		if all {
			count++
		}
	}
	return count
}
