package planted

// Found in attack27 (review of a45e6a9), fixed for issue 18.
// The guard sets deadlines lazily (9aac332).
// These failed as of 9692045 and before 7252de9 the pool's did.
// Not history: libfaketime issue #130, a SHA "deadbeef" (ffffffff), 0x1234abcd, run 1234567.
