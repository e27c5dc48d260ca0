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
// The clients are goroutines, each with its own Redlock — among them, in
// the scenarios on masters, two that hold for several TTLs and renew (one
// with auto-extend, one calling Extend), so that the faults reach the
// renewal path — or, in the process-* scenarios, OS processes: "redlock
// exec --fencing" around "redlock chaos writer", frozen with SIGSTOP and
// killed with SIGKILL for real (see procclient.go for what a holding is
// then). The goroutine clients reach the masters through go-redis, through
// rueidis (redlockrueidis), or, with [AdapterMixed], each kind in turn on
// the same locks ([Config.Adapter]).
//
// [Check] explains a history; porcupine cross-checks it (crosscheck.go):
// the same history must be linearizable against a sequential lock exactly
// when Check finds no overlap, and, for fenced runs, against a fenced
// register exactly when no write broke the fence. A scenario where the two
// disagree fails. [ScenarioReport.WriteTimeline] draws a history.
//
// [Run] runs scenarios and returns a [Report]; [Command] is the
// "redlock chaos" command line. With [Config.Soak] the safe scenarios run
// until they have acquired that many locks.
package chaos
