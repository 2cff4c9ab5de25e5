package resp

import (
	"bytes"
)

// MaxInfoReply bounds the INFO server reply RunID reads: a server's is
// about 1.5 KB; a master sending more is not identified.
const MaxInfoReply = 64 << 10

// RunID returns the run_id of an INFO server reply, or "" when the reply
// is not a bulk string ([]byte, or a string as an Inspector may give it)
// of at most MaxInfoReply bytes, or has no run_id of 40 lowercase hex
// digits. The reply is untrusted.
func RunID(reply any) string {
	var b []byte
	switch v := reply.(type) {
	case []byte: // redigo's bulk string
		b = v
	case string: // an Inspector's (the go-redis adapter's) bulk string
		if len(v) > MaxInfoReply {
			return ""
		}
		b = []byte(v)
	default:
		return ""
	}
	if len(b) > MaxInfoReply {
		return ""
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		v, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("run_id:"))
		if !ok {
			continue
		}
		if len(v) != 40 {
			return ""
		}
		for _, ch := range v {
			if (ch < '0' || ch > '9') && (ch < 'a' || ch > 'f') {
				return ""
			}
		}
		return string(v)
	}
	return ""
}
