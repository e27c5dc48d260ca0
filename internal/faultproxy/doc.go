// Package faultproxy is a fault-injecting TCP proxy to put in front of one
// Redis server: it adds latency to requests (for benchmarks) and partitions
// the server from its clients, silently or loudly (for the chaos harness).
//
// A [Proxy] listens on a loopback port and forwards every connection it
// accepts to its target on a connection of its own. Faults apply at the
// proxy, so the server itself keeps running and keeps its data.
package faultproxy
