package redlock_test

import "github.com/redlock/redlock"

// The helpers this package shares with the internal tests (package
// redlock), lent by export_test.go, under the names they have there. In
// this package's tests every name qualified with redlock. is the library's
// API; the unqualified ones are these and the helpers of the file at hand.

// masters returns the five masters TestMain starts (main_test.go); the
// tests use keys of their own on them.
var masters = redlock.Masters

var (
	settle     = redlock.Settle
	waitQueued = redlock.WaitQueued
)

const driftFloor = redlock.DriftFloor

var (
	testKey             = redlock.UniqueKey
	clients             = redlock.Clients
	nodesOf             = redlock.NodesOf
	newRedlock          = redlock.NewRedlock
	holders             = redlock.Holders
	count               = redlock.Count
	holds               = redlock.Holds
	mustLock            = redlock.MustLock
	mustRefuse          = redlock.MustRefuse
	occupy              = redlock.Occupy
	free                = redlock.Free
	faultClients        = redlock.FaultClients
	waitDialProbes      = redlock.WaitDialProbes
	limitRapidChecks    = redlock.LimitRapidChecks
	lockAsync           = redlock.LockAsync
	obtainedWithin      = redlock.ObtainedWithin
	waitRegistered      = redlock.WaitRegistered
	handedLock          = redlock.HandedLock
	merge               = redlock.Merge
	clusterMasters      = redlock.ClusterMasters
	clusterNodes        = redlock.ClusterNodes
	clusterGets         = redlock.ClusterGets
	ringMaster          = redlock.RingMaster
	shardOf             = redlock.ShardOf
	aclUser             = redlock.AclUser
	aclRefusal          = redlock.AclRefusal
	userRedlock         = redlock.UserRedlock
	aclCommands         = redlock.AclCommands
	gateClients         = redlock.GateClients
	gateRefusals        = redlock.GateRefusals
	startReplicated     = redlock.StartReplicated
	replicatedNodes     = redlock.ReplicatedNodes
	setReplicationDelay = redlock.SetReplicationDelay
	startFake           = redlock.StartFake
	holdMany            = redlock.HoldMany
	unlockAll           = redlock.UnlockAll
	idleGoroutines      = redlock.IdleGoroutines
	unlockWaited        = redlock.UnlockWaited
)

type (
	obtained    = redlock.Obtained
	sentCounter = redlock.SentCounter
	quietLogger = redlock.QuietLogger
	recorder    = redlock.Recorder
)

const (
	foreign       = redlock.Foreign
	aclPassword   = redlock.AclPassword
	quietChildEnv = redlock.QuietChildEnv
	quietLineEnv  = redlock.QuietLineEnv
)
