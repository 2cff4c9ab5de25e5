// Package keys names the companion keys that live beside a lock key.
package keys

import "strings"

// Companion names a key that lives beside key in the same Redis Cluster
// hash slot, so that one script can touch both: key itself plus suffix
// when key has a hash tag ({...} with something inside), else key wrapped
// in braces, so that all of key is the tag, plus suffix. (A key with no
// hash tag that holds a '}' after its first '{', such as "{}x", hashes as a
// whole and no tag can say so: its companions land in another slot, which
// matters only on a Redis Cluster node.)
func Companion(key, suffix string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key + suffix
		}
	}
	return "{" + key + "}" + suffix
}
