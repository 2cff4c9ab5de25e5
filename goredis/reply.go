package goredis

import (
	"fmt"
	"strconv"
)

// Replies. go-redis hands a command's reply back as Go values: int64 for
// an integer, string for a status or a bulk string (it does not tell them
// apart), []interface{} for an array, the error redis.Nil for a null, and
// an error implementing redis.Error for an error reply; over RESP3 also
// bool, float64, *big.Int and maps. The lock's scripts and commands answer
// only integers, strings, nulls and error replies (internal/scripts/*.lua),
// so normalize lets exactly those through (and arrays of them, bounded)
// and turns anything else into an error: a reply the lock did not ask for
// is never a vote.

// maxArray bounds the elements of an array reply the lane accepts.
const maxArray = 64

// normalize checks a reply go-redis decoded (redis.Nil already turned into
// nil) and returns it as nil, int64, string, or []any of those.
func normalize(v any) (any, error) {
	return normalizeDepth(v, 0)
}

func normalizeDepth(v any, depth int) (any, error) {
	switch v := v.(type) {
	case nil, int64, string:
		return v, nil
	case []any:
		if depth > 0 {
			return nil, fmt.Errorf("nested array reply")
		}
		if len(v) > maxArray {
			return nil, fmt.Errorf("array reply of %d elements", len(v))
		}
		out := make([]any, len(v))
		for i, e := range v {
			n, err := normalizeDepth(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	default:
		return nil, fmt.Errorf("reply of type %s", typeName(v))
	}
}

// typeName names a reply's Go type without printing the reply's bytes.
func typeName(v any) string {
	switch v.(type) {
	case bool:
		return "boolean"
	case float64:
		return "double"
	case map[any]any:
		return "map"
	default:
		return strconv.Quote(fmt.Sprintf("%T", v))
	}
}

// desyncError is a reply that is not one the lock's commands give.
type desyncError struct{ err error }

func (e *desyncError) Error() string { return "unexpected " + e.err.Error() }
func (e *desyncError) Unwrap() error { return e.err }
