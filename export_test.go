package redlock

import "github.com/redlock/redlock/internal/redistest"

// This file lends package redlock_test, the tests that use only what a user
// can call, the little they need from the inside. helpers_test.go gives
// each name back the name it has here, so that a test reads the same in
// both packages.

// Waits for what a Redlock does out of the caller's sight: its background
// requests (settle), a goroutine queued for a key (waitQueued).
var (
	Settle     = settle
	WaitQueued = waitQueued
)

// DriftFloor is the fixed part of every lock's drift allowance (clock.go).
const DriftFloor = driftFloor

// Masters returns the masters TestMain starts, once it has.
func Masters() *redistest.Cluster { return masters }

// The helpers the internal tests share with the external ones, defined once:
// in main_test.go and in the *_internal_test.go file named after what they
// help test.
var (
	UniqueKey           = testKey
	Clients             = clients
	NodesOf             = nodesOf
	NewRedlock          = newRedlock
	Holders             = holders
	Count               = count
	Holds               = holds
	MustLock            = mustLock
	MustRefuse          = mustRefuse
	Occupy              = occupy
	Free                = free
	FaultClients        = faultClients
	WaitDialProbes      = waitDialProbes
	LimitRapidChecks    = limitRapidChecks
	LockAsync           = lockAsync
	ObtainedWithin      = obtainedWithin
	WaitRegistered      = waitRegistered
	HandedLock          = handedLock
	Merge               = merge
	ClusterMasters      = clusterMasters
	ClusterNodes        = clusterNodes
	ClusterGets         = clusterGets
	RingMaster          = ringMaster
	ShardOf             = shardOf
	AclUser             = aclUser
	AclRefusal          = aclRefusal
	UserRedlock         = userRedlock
	AclCommands         = aclCommands
	GateClients         = gateClients
	GateRefusals        = gateRefusals
	StartReplicated     = startReplicated
	ReplicatedNodes     = replicatedNodes
	SetReplicationDelay = setReplicationDelay
	StartFake           = startFake
	HoldMany            = holdMany
	UnlockAll           = unlockAll
	IdleGoroutines      = idleGoroutines
	UnlockWaited        = unlockWaited
)

type (
	Obtained    = obtained
	SentCounter = sentCounter
	QuietLogger = quietLogger
	Recorder    = recorder
)

const (
	Foreign       = foreign
	AclPassword   = aclPassword
	QuietChildEnv = quietChildEnv
	QuietLineEnv  = quietLineEnv
)
