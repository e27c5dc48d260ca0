package redlock

import "github.com/redlock/redlock/internal/redistest"

// This file lends package redlock_test, the tests that use only what a user
// can call, what they cannot have from the API: two waits for what a
// Redlock does out of the caller's sight, a constant of the validity
// arithmetic, the shared masters, and the helpers they share with the
// internal tests. Each is defined once, in package redlock's test files,
// where the internal tests use it too; helpers_test.go gives it back its own
// name in package redlock_test, so that a test reads the same in either
// package.

// Settle waits for the requests a Redlock still runs in the background;
// WaitQueued, until a goroutine of the Redlock waits for a key.
var (
	Settle     = settle
	WaitQueued = waitQueued
)

// DriftFloor is the fixed part of every lock's drift allowance (options.go).
const DriftFloor = driftFloor

// Masters returns the masters TestMain starts, once it has started them.
func Masters() *redistest.Cluster { return masters }

// The shared helpers, by the file that defines them.
var (
	// main_test.go
	UniqueKey  = testKey
	Clients    = clients
	NodesOf    = nodesOf
	NewRedlock = newRedlock
	Holders    = holders
	Count      = count
	StartFake  = startFake

	// lock_internal_test.go
	Holds      = holds
	MustLock   = mustLock
	MustRefuse = mustRefuse

	// fence_internal_test.go
	Occupy           = occupy
	Free             = free
	FaultClients     = faultClients
	WaitDialProbes   = waitDialProbes
	LimitRapidChecks = limitRapidChecks

	// handoff_internal_test.go
	LockAsync      = lockAsync
	ObtainedWithin = obtainedWithin
	WaitRegistered = waitRegistered
	HandedLock     = handedLock
	Merge          = merge

	// goredis_internal_test.go
	ClusterMasters = clusterMasters
	ClusterNodes   = clusterNodes
	ClusterGets    = clusterGets
	RingMaster     = ringMaster
	ShardOf        = shardOf
	AclCommands    = aclCommands
	AclUser        = aclUser
	UserRedlock    = userRedlock
	AclRefusal     = aclRefusal

	// protocol_internal_test.go
	GateClients         = gateClients
	GateRefusals        = gateRefusals
	StartReplicated     = startReplicated
	ReplicatedNodes     = replicatedNodes
	SetReplicationDelay = setReplicationDelay

	// scheduler_internal_test.go
	HoldMany       = holdMany
	UnlockAll      = unlockAll
	IdleGoroutines = idleGoroutines

	// turn_internal_test.go
	UnlockWaited = unlockWaited
)

type (
	// main_test.go
	QuietLogger = quietLogger

	// handoff_internal_test.go
	Obtained    = obtained
	SentCounter = sentCounter

	// observe_internal_test.go
	Recorder = recorder
)

const (
	// redlock_internal_test.go
	Foreign = foreign

	// goredis_internal_test.go
	AclPassword   = aclPassword
	QuietChildEnv = quietChildEnv
	QuietLineEnv  = quietLineEnv
)
