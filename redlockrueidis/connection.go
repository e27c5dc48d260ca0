package redlockrueidis

import "github.com/redis/rueidis"

// connPromise says why a client made with opt does not promise that each
// batch reaches its master on one connection and is never sent again
// (redlock.Traits.OneConnection), "" when it does. What rueidis v1.0.79
// does with a DoMulti of commands built without a read-only mark, as
// build builds them (see TestConnectionPromise and TestConnLifetime):
//
//   - the client of one server, or of a Sentinel-managed primary, sends
//     the batch on one connection: a pipelined one (the first of
//     PipelineMultiplex's, for commands without a slot, whatever
//     AlwaysPipelining and MaxFlushDelay), or one its pool lends for the
//     whole batch (DisableAutoPipelining; a batch of BlockingPipeline
//     commands or more). A Sentinel failover gives later batches a new
//     connection; the batch in flight ends, answered or failed, on the
//     old one (TestSentinelFailoverMidBatch).
//   - it retries only commands marked read-only (DisableRetry, RetryDelay
//     and the LOADING retry concern no other), and sends a batch to a
//     replica (SendToReplicas) only when every command of it should go
//     there, whole.
//   - ConnLifetime: when the shared connection reaches the end of its
//     lifetime, rueidis waits a second for the replies in flight, closes
//     it, and, if it had pipelined (served two calls at once, or with
//     AlwaysPipelining), sends the unanswered commands of the batch in
//     flight again on a new connection (singleClient.DoMulti,
//     sentinelClient.DoMulti; seen: WAIT run 3 times for one batch): a WAIT
//     sent again there does not follow the batch's writes on their
//     connection. A connection lent by its pool has no lifetime until
//     given back (DisableAutoPipelining keeps every batch on such
//     connections).
//   - Standalone.EnableRedirect: a command answered REDIRECT (Valkey's
//     replica, after a failover) makes it send the whole batch again to
//     the new primary (standalone.DoMulti).
//   - a cluster client sends each command to the shard of its key.
func connPromise(cluster bool, opt rueidis.ClientOption) string {
	switch {
	case cluster:
		return "a rueidis cluster client routes each command to the shard of its key"
	case opt.ConnLifetime > 0 && !opt.DisableAutoPipelining:
		return "rueidis sends the unanswered commands of a batch again on a new connection when the batch's connection reaches its ConnLifetime: leave ClientOption.ConnLifetime 0, or set DisableAutoPipelining (a connection rueidis lends a batch keeps no lifetime)"
	case opt.Standalone.EnableRedirect:
		return "rueidis sends a whole batch again to the new primary when a command of it is answered REDIRECT: leave ClientOption.Standalone.EnableRedirect false"
	}
	return ""
}
