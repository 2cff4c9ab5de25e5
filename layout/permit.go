package layout

import (
	"strconv"

	"github.com/quorumlock/quorumlock/internal/keys"
)

// PermitSuffix names a semaphore's permit slots: slot i of semaphore key
// is the lock key PermitKey(key, i).
const PermitSuffix = ":permit:"

// PermitKey returns the lock key of slot i of the semaphore on key: in key's
// Redis Cluster hash slot (key's own hash tag if it has one, else {key}),
// so every slot of a semaphore, and their companions, live in one slot.
func PermitKey(key string, i int) string {
	return keys.Companion(key, PermitSuffix+strconv.Itoa(i))
}
