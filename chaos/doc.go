// Package chaos is the fault-injection harness: it starts N real Redis
// masters (in Docker containers or as local processes behind fault proxies),
// has M clients contend for K keys through their own [redlock.Redlock]s while
// masters are killed, paused, partitioned and restarted — on a schedule and
// in the middle of an acquire — and checks the recorded history for what the
// lock promised: no two holders of one key at once, no write accepted from a
// holder whose validity had ended.
//
// Each scenario states the verdict it must reach. Some must find unsafety:
// a holder paused past its validity writes late (accepted without fencing,
// rejected with it), and a master restarted empty at once hands a second
// client a quorum while the first still holds the lock. A checker that never
// finds anything proves nothing, so those scenarios fail when it finds
// nothing.
//
// [Run] runs scenarios and returns a [Report]; [Command] is the
// "redlock chaos" command line.
package chaos
