package redlock_test

import "github.com/redlock/redlock"

// What this package has from package redlock's test files (main_test.go
// lends it), under the names it has there. In this package's tests, every
// name qualified with redlock. is the library's API; the unqualified ones
// are these and the helpers of the file at hand.

// masters returns the five masters TestMain starts (main_test.go); each
// test uses keys of its own on them.
var masters = redlock.Masters

var (
	settle     = redlock.Settle
	waitQueued = redlock.WaitQueued
)

const driftFloor = redlock.DriftFloor

// The shared helpers, by the file that defines them.
var (
	// main_test.go
	testKey    = redlock.UniqueKey
	clients    = redlock.Clients
	nodesOf    = redlock.NodesOf
	newRedlock = redlock.NewRedlock
	holders    = redlock.Holders
	count      = redlock.Count
	startFake  = redlock.StartFake

	// lock_internal_test.go
	holds      = redlock.Holds
	mustLock   = redlock.MustLock
	mustRefuse = redlock.MustRefuse

	// fence_internal_test.go
	occupy           = redlock.Occupy
	free             = redlock.Free
	faultClients     = redlock.FaultClients
	waitDialProbes   = redlock.WaitDialProbes
	limitRapidChecks = redlock.LimitRapidChecks

	// handoff_internal_test.go
	lockAsync      = redlock.LockAsync
	obtainedWithin = redlock.ObtainedWithin
	waitRegistered = redlock.WaitRegistered
	handedLock     = redlock.HandedLock
	merge          = redlock.Merge

	// goredis_internal_test.go
	clusterMasters = redlock.ClusterMasters
	clusterNodes   = redlock.ClusterNodes
	clusterGets    = redlock.ClusterGets
	ringMaster     = redlock.RingMaster
	shardOf        = redlock.ShardOf
	aclCommands    = redlock.AclCommands
	aclUser        = redlock.AclUser
	userRedlock    = redlock.UserRedlock
	aclRefusal     = redlock.AclRefusal

	// protocol_internal_test.go
	gateClients         = redlock.GateClients
	gateRefusals        = redlock.GateRefusals
	startReplicated     = redlock.StartReplicated
	replicatedNodes     = redlock.ReplicatedNodes
	setReplicationDelay = redlock.SetReplicationDelay

	// scheduler_internal_test.go
	holdMany       = redlock.HoldMany
	unlockAll      = redlock.UnlockAll
	idleGoroutines = redlock.IdleGoroutines

	// turn_internal_test.go
	unlockWaited = redlock.UnlockWaited
)

type (
	// main_test.go
	quietLogger = redlock.QuietLogger
	recorder    = redlock.Recorder

	// handoff_internal_test.go
	obtained    = redlock.Obtained
	sentCounter = redlock.SentCounter
)

const (
	// redlock_internal_test.go
	foreign = redlock.Foreign

	// goredis_internal_test.go
	aclPassword   = redlock.AclPassword
	quietChildEnv = redlock.QuietChildEnv
	quietLineEnv  = redlock.QuietLineEnv
)
