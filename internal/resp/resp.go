// Package resp reads masters' replies, which are untrusted, in the
// shapes redigo decodes them to (and an Inspector may give them in):
// bulk strings as []byte or string, integers as int64, arrays as []any.
package resp

import (
	"fmt"
	"strconv"
)

// Bulk returns a bulk string reply ([]byte, or a string as an Inspector
// may give it) as a string, and whether v was one.
func Bulk(v any) (string, bool) {
	switch v := v.(type) {
	case []byte:
		return string(v), true
	case string:
		return v, true
	}
	return "", false
}

// Shape names a reply's shape and size, never its bytes, for an error
// message about a reply that is not what was expected.
func Shape(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case int64:
		return "an integer"
	case string:
		return "a string of " + strconv.Itoa(len(v)) + " bytes"
	case []byte:
		return "a bulk string of " + strconv.Itoa(len(v)) + " bytes"
	case []any:
		return "an array of " + strconv.Itoa(len(v)) + " elements"
	}
	return fmt.Sprintf("a %T", v)
}
