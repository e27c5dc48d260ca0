package redlock

import (
	"strconv"
	"strings"
	"sync"
)

// The keys kept next to a lock key — its fence counter ([FenceKey]) and its
// queue of waiting calls ([WaitKey]) — are named so that a Redis Cluster
// puts them in the lock key's hash slot: every script touches the lock key
// and one of them, and a cluster refuses a script whose keys are in two
// slots (CROSSSLOT).
//
// A cluster hashes only a key's hash tag, when it has one: the bytes between
// its first '{' and the first '}' after it, when there is at least one.
// Else it hashes the whole key. So the name of a derived key (NAME is
// "fence" or "waiters") is:
//
//  1. key:NAME, when key has a hash tag: it keeps key's tag, since the
//     suffix has no braces. These names did not change.
//  2. NAME:{key}, when key has none and no '}': the tag is then key itself.
//  3. NAME:{t}key, when key has none but has a '}' (such as "a}b", "x{}y}"
//     or "{}"): key cannot be a tag, so t is a short tag of key's slot
//     (slotTag), and key follows it to keep the name unique.
//
// No derived name of one lock is another lock's key, nor another lock's
// derived name: names of the first kind end in ":NAME", those of the others
// start with "NAME:{" and end in '}' or in the lock key, and Lock refuses lock keys of either shape (derivedFrom). The
// shape "{key}:fence" would not do: it is also the counter of the lock
// "{key}" by rule 1.
func derivedKey(key, name string) string {
	if _, ok := hashTag(key); ok {
		return key + ":" + name
	}
	if !strings.Contains(key, "}") {
		return name + ":{" + key + "}"
	}
	return name + ":{" + slotTags()[keySlot(key)] + "}" + key
}

// derivedFrom reports whether a lock key of this name would be refused
// because it has the shape of a derived key: which kind ("fence" or
// "waiters"), and the lock key it belongs to when there is one.
func derivedFrom(key string) (name, lock string, ok bool) {
	for _, name := range [...]string{"fence", "waiters"} {
		if lock, ok := strings.CutSuffix(key, ":"+name); ok {
			return name, lock, true
		}
		if rest, ok := strings.CutPrefix(key, name+":{"); ok {
			if inner, ok := strings.CutSuffix(rest, "}"); ok && !strings.Contains(inner, "}") {
				return name, inner, true
			}
			if _, lock, ok := strings.Cut(rest, "}"); ok {
				return name, lock, true
			}
			return name, "", true
		}
	}
	return "", "", false
}

// hashTag returns key's hash tag, as a Redis Cluster finds it: the bytes
// between the first '{' and the first '}' after it, when not empty.
func hashTag(key string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key without one, modulo 16384.
func keySlot(key string) uint16 {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	return crc16(key) & 16383
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTags is, for each of the 16384 slots, the smallest decimal number
// whose hash is that slot: a tag that puts a derived key in a given slot.
// Made on first use (about 170,000 hashes), by keys of rule 3 only.
var slotTags = sync.OnceValue(func() *[16384]string {
	var tags [16384]string
	for i, left := 0, len(tags); left > 0; i++ {
		s := strconv.Itoa(i)
		if slot := crc16(s) & 16383; tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
	return &tags
})

// FenceKey is the name of the fence counter kept on each master next to key:
// key + ":fence" when key has a Redis Cluster hash tag (a non-empty {…},
// the first '{' to the first '}' after it), else "fence:{" + key + "}" (or,
// for a key with a '}' but no tag, "fence:{T}" + key with T a short tag of
// key's hash slot). Either way it is in key's hash slot, so that a master
// that is a Redis Cluster runs the scripts that touch both. Earlier versions
// kept the counter of a key without a tag at key + ":fence": the README says
// what the move means ("Fencing tokens").
//
// It never expires: deleting it while the lock is in use can hand out a token
// that does not increase (the clock floor limits the damage to restarts).
// Lock and TryLock refuse keys of either shape (ending in ":fence", or
// starting with "fence:{") with a [*ConfigError], so that no lock is ever
// taken on another lock's counter.
func FenceKey(key string) string { return derivedKey(key, "fence") }

// WaitKey is the name of the queue, kept on each master next to key, of the
// Lock calls waiting for key, in the order they started: a release that
// frees key hands it to the first one still listening (or wakes it, for
// fenced and owned locks). It expires a minute after the last call queued.
// It is named as [FenceKey] is, with "waiters" for "fence": key +
// ":waiters" when key has a hash tag, else "waiters:{" + key + "}", in key's
// hash slot either way. Lock and TryLock refuse keys of either shape with a
// [*ConfigError].
func WaitKey(key string) string { return derivedKey(key, "waiters") }
