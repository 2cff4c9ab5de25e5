// Package keys spells what quorumlock keeps on a master beside a lock key:
// the companion keys' names and suffixes, the fields of a read-write
// lock's hash and an election's terms, the release channel and its
// notices. Package layout documents the layout and names the keys for
// users; the parts it is spelled from live here.
package keys

import "strings"

// Companion names a key that lives beside key in the same Redis Cluster
// hash slot, so that one script can touch both: key itself plus suffix
// when key has a hash tag ({...} with something inside), else key wrapped
// in braces, so that all of key is the tag, plus suffix. (An empty key, or
// a key with no hash tag that holds a '}', such as "{}x" or "a}b", hashes
// as a whole and no tag can say so: its companions land in another slot,
// which matters only on a Redis Cluster node; SharesSlot tells.)
func Companion(key, suffix string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key + suffix
		}
	}
	return "{" + key + "}" + suffix
}

// SharesSlot reports whether key's companions (Companion) are in key's
// hash slot.
func SharesSlot(key string) bool {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return true
		}
	}
	return key != "" && !strings.Contains(key, "}")
}

// Slot returns key's Redis Cluster hash slot: CRC16 (XMODEM) of its hash
// tag — the part between the first '{' and the next '}' when that is not
// empty — or else of the whole key, modulo 16384.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster
// uses it.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
