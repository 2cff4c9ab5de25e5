package wake

import "strconv"

// Pilot returns the master a woken waiter's attempt on key asks first,
// the key's pilot, among n masters, or -1 for none (fewer than two
// masters, or every one passed over by skip). Every process must name the
// same pilot for a key without talking to the others, whatever order it
// lists its masters in: the pilot is the master whose id hashes highest
// together with the key (rendezvous hashing), so keys spread evenly over
// the masters. ids are the masters' run_ids by position, or nil until
// every one is known: the positions stand in. skip(i) passes master i
// over (it failed a command lately). Pilot allocates nothing: it runs on
// every notice and every woken attempt.
func Pilot(key string, ids []string, n int, skip func(i int) bool) int {
	if n < 2 {
		return -1
	}
	k := fnv64a(fnvOffset, key)
	best, bestScore := -1, uint64(0)
	var num [20]byte
	for i := 0; i < n; i++ {
		if skip(i) {
			continue
		}
		var h uint64
		if ids != nil {
			h = fnv64a(fnvOffset, ids[i])
		} else {
			h = fnv64aBytes(fnvOffset, strconv.AppendInt(num[:0], int64(i), 10))
		}
		if s := mix64(h ^ k); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// FNV-1a, 64 bits (hash/fnv's New64a, without its allocation per call):
// processes of every version name the same pilot for a key.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv64a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnv64aBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// mix64 is MurmurHash3's 64-bit finalizer: every bit of x moves about
// half of the result's, which FNV alone does not do for inputs that differ
// only in their last bytes.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
