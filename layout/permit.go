package layout

import (
	"strconv"

	"github.com/quorumlock/quorumlock/internal/keys"
)

// PermitKey returns the lock key of slot i of the semaphore on key: in key's
// Redis Cluster hash slot (key's own hash tag if it has one, else {key}),
// so every slot of a semaphore, and their companions, live in one slot.
func PermitKey(key string, i int) string {
	return keys.Companion(key, keys.PermitSuffix+strconv.Itoa(i))
}
