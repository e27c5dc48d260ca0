package sim

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The master's Redis: a keyspace of strings, hashes and sorted sets, each
// key expiring by the master's own clock; the commands the production Node
// sends and the library's scripts call, with Redis's semantics (WRONGTYPE,
// NX, expiry, empty hashes and sorted sets deleted); and EVAL, which runs
// the script sent in a Lua 5.1 interpreter (lua.go) with a redis library
// that converts between Lua and RESP as Redis 7.0 does. A master runs
// exactly the command the production code builds and hands back the reply
// as a Node hands it to the core, so the simulation checks the real
// scripts, never a copy.
//
// A command, an option or an argument type the shim does not simulate
// fails loudly: the command fails and ExecLocked says so (Result.ShimErr),
// which the simulation and the agreement tests report. Known differences
// from Redis, none of which today's scripts meet: gopher-lua converts a
// number to a string for `..` and string.format('%s') with all its digits
// where Lua 5.1 keeps 14 (tostring is Lua's here); a script's implicit
// 'arg' table (Lua 5.0's varargs) is nil; errors raised by a script carry
// the script's name but not its line, and the interpreter's own messages
// are worded its own way.

// simKind is a key's type, as TYPE names it.
type simKind uint8

const (
	kindNone simKind = iota
	kindString
	kindHash
	kindZset
)

func (k simKind) String() string { return [...]string{"none", "string", "hash", "zset"}[k] }

// simKey is one key of a master's keyspace.
type simKey struct {
	kind     simKind
	str      string             // kindString
	hash     []simField         // kindHash, in insertion order (a listpack's)
	zset     map[string]float64 // kindZset: member → score
	expireAt int64              // on the master's clock, ns; 0: none. Gone from then on.

	// What the checker needs to know, not Redis state. It stays with the
	// key while the key lives (PEXPIRE, HSET, HDEL keep it; SET makes a
	// new key, DEL and expiry drop it).
	setBy  any            // a string key: what set it (MarkLocked)
	handTo string         // a string key a script set and then published about: the channel told
	holdBy map[string]any // a hash: what entered each field (MarkLocked)
	born   int            // the master's incarnation that made the key (a snapshot keeps it)
}

// clone copies k, for a snapshot (Master.save) and the restart that
// loads it.
func (k *simKey) clone() *simKey {
	c := *k
	c.hash = slices.Clone(k.hash)
	if k.zset != nil {
		c.zset = maps.Clone(k.zset)
	}
	if k.holdBy != nil {
		c.holdBy = maps.Clone(k.holdBy)
	}
	return &c
}

type simField struct{ name, value string }

func (k *simKey) hget(f string) (string, bool) {
	for _, x := range k.hash {
		if x.name == f {
			return x.value, true
		}
	}
	return "", false
}

// respKind and respValue are a reply as Redis sends it.
type respKind uint8

const (
	respNil respKind = iota
	respInt
	respBulk
	respStatus
	respErr
	respArray
)

type respValue struct {
	kind respKind
	n    int64  // respInt
	s    string // respBulk, respStatus, respErr (the text after '-')
	arr  []respValue
}

func errReply(s string) respValue    { return respValue{kind: respErr, s: s} }
func intReply(n int64) respValue     { return respValue{kind: respInt, n: n} }
func bulkReply(s string) respValue   { return respValue{kind: respBulk, s: s} }
func statusReply(s string) respValue { return respValue{kind: respStatus, s: s} }

const (
	errWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	errNotInt    = "ERR value is not an integer or out of range"
	errNotFloat  = "ERR value is not a valid float"
	errSyntax    = "ERR syntax error"
)

// simExec is one command's run on a master, a script's commands included
// (the master's lock held, master up).
type simExec struct {
	m *Master
	// now is the master's clock (ns) when the command began: Redis, too,
	// judges expiry inside a script by the time the script started.
	now      int64
	inScript bool
	shimErr  error // the first thing the shim does not simulate
	luaErr   error // a script raised an error (not an error reply it returned)

	// For the wake statistics and the checker's handTo: keys the script
	// SET since its last PUBLISH; whether a PUBLISH reached a subscriber,
	// and a ZADD came after it.
	fresh           []string
	told, addedLast bool
}

// shimFail records that the shim met something it does not simulate and
// returns the error reply the command gives.
func (x *simExec) shimFail(format string, args ...any) respValue {
	err := fmt.Errorf("sim: "+format, args...)
	if x.shimErr == nil {
		x.shimErr = err
	}
	return errReply("ERR " + err.Error())
}

// lookup returns key unless it is missing or has expired (then it is gone).
func (x *simExec) lookup(key string) *simKey {
	k := x.m.keys[key]
	if k != nil && k.expireAt != 0 && x.now >= k.expireAt {
		delete(x.m.keys, key)
		return nil
	}
	return k
}

// simCmd is a command: its arity as Redis declares it (n: exactly n
// words, -n: at least n) and what it does.
type simCmd struct {
	arity    int
	noScript bool // refused inside a script
	run      func(x *simExec, a []string) respValue
}

var simCommands map[string]simCmd

func init() {
	simCommands = map[string]simCmd{
		"get":           {2, false, cmdGet},
		"set":           {-3, false, cmdSet},
		"del":           {-2, false, cmdDel},
		"exists":        {-2, false, cmdExists},
		"pexpire":       {-3, false, cmdPexpire},
		"time":          {1, false, cmdTime},
		"info":          {-1, false, cmdInfo},
		"lastsave":      {1, false, cmdLastsave},
		"type":          {2, false, cmdType},
		"hget":          {3, false, cmdHget},
		"hmget":         {-3, false, cmdHmget},
		"pttl":          {2, false, cmdPttl},
		"hset":          {-4, false, cmdHset},
		"hdel":          {-3, false, cmdHdel},
		"hgetall":       {2, false, cmdHgetall},
		"zadd":          {-4, false, cmdZadd},
		"zrem":          {-3, false, cmdZrem},
		"zrange":        {-4, false, cmdZrange},
		"zrangebyscore": {-4, false, cmdZrangebyscore},
		"publish":       {3, false, cmdPublish},
		"eval":          {-3, true, cmdEval},
	}
}

// dispatch runs one command.
func (x *simExec) dispatch(a []string) respValue {
	name := strings.ToLower(a[0])
	c, ok := simCommands[name]
	if !ok {
		return x.shimFail("command %q is not simulated (internal/sim)", a[0])
	}
	if x.inScript && c.noScript {
		return errReply("ERR This Redis command is not allowed from script")
	}
	if c.arity > 0 && len(a) != c.arity || len(a) < -c.arity {
		if x.inScript {
			return errReply("ERR Wrong number of args calling Redis command from script")
		}
		return errReply("ERR wrong number of arguments for '" + name + "' command")
	}
	return c.run(x, a)
}

// redisInt parses an integer argument as Redis does (string2ll: no sign
// but '-', no leading zero, no space, no overflow).
func redisInt(s string) (int64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	d := s
	if d[0] == '-' {
		d = d[1:]
	}
	if d == "" || d[0] < '0' || d[0] > '9' || len(d) > 1 && d[0] == '0' || s == "-0" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// redisFloat parses a score as Redis does (strtod, whole string, no NaN).
func redisFloat(s string) (float64, bool) {
	if s == "" || s[0] == ' ' || s[0] == '\t' || strings.Contains(s, "_") {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// expireAt is when a key given ms to live now is gone, on the master's
// clock in ns, or ok false when Redis refuses the time as invalid. Redis
// keeps expiries in whole ms: the expiry is its millisecond now + ms, and it
// expires a key once its millisecond is past the expiry (now > when), so
// the key lives through that millisecond: it is gone from the start of the
// next one.
func (x *simExec) expireAt(ms int64) (int64, bool) {
	nowMs := x.now / int64(time.Millisecond)
	if ms > math.MaxInt64-nowMs {
		return 0, false
	}
	if ms >= math.MaxInt64/int64(time.Millisecond)-nowMs-1 {
		return math.MaxInt64, true
	}
	return (nowMs + ms + 1) * int64(time.Millisecond), true
}

func cmdGet(x *simExec, a []string) respValue {
	k := x.lookup(a[1])
	switch {
	case k == nil:
		return respValue{}
	case k.kind != kindString:
		return errReply(errWrongType)
	}
	return bulkReply(k.str)
}

// cmdSet is SET key value [NX|XX] [PX ms|EX s].
func cmdSet(x *simExec, a []string) respValue {
	var nx, xx bool
	unit, ttl := int64(0), ""
	for i := 3; i < len(a); i++ {
		switch o := strings.ToUpper(a[i]); o {
		case "NX", "XX":
			if nx || xx {
				return errReply(errSyntax)
			}
			nx, xx = o == "NX", o == "XX"
		case "PX", "EX":
			if unit != 0 || i+1 >= len(a) {
				return errReply(errSyntax)
			}
			unit, ttl = 1, a[i+1]
			if o == "EX" {
				unit = 1000
			}
			i++
		case "GET", "KEEPTTL", "EXAT", "PXAT":
			return x.shimFail("SET option %s is not simulated", a[i])
		default:
			return errReply(errSyntax)
		}
	}
	var at int64
	if unit != 0 {
		n, ok := redisInt(ttl)
		if !ok {
			return errReply(errNotInt)
		}
		if n <= 0 || unit == 1000 && n > math.MaxInt64/1000 {
			return errReply("ERR invalid expire time in 'set' command")
		}
		if at, ok = x.expireAt(n * unit); !ok {
			return errReply("ERR invalid expire time in 'set' command")
		}
	}
	k := x.lookup(a[1])
	if nx && k != nil || xx && k == nil {
		return respValue{}
	}
	x.m.keys[a[1]] = &simKey{kind: kindString, str: a[2], expireAt: at, born: x.m.incarnation}
	if x.inScript {
		x.fresh = append(x.fresh, a[1])
	}
	return statusReply("OK")
}

func cmdDel(x *simExec, a []string) respValue {
	n := int64(0)
	for _, key := range a[1:] {
		if x.lookup(key) != nil {
			delete(x.m.keys, key)
			n++
		}
	}
	return intReply(n)
}

// cmdExists is EXISTS key...: how many of the keys are live, a key named
// twice counted twice (as Redis does).
func cmdExists(x *simExec, a []string) respValue {
	n := int64(0)
	for _, key := range a[1:] {
		if x.lookup(key) != nil {
			n++
		}
	}
	return intReply(n)
}

// cmdPexpire is PEXPIRE key ms.
func cmdPexpire(x *simExec, a []string) respValue {
	if len(a) > 3 {
		return x.shimFail("PEXPIRE option %s is not simulated", a[3])
	}
	ms, ok := redisInt(a[2])
	if !ok {
		return errReply(errNotInt)
	}
	at, ok := x.expireAt(ms)
	if !ok {
		return errReply("ERR invalid expire time in 'pexpire' command")
	}
	k := x.lookup(a[1])
	if k == nil {
		return intReply(0)
	}
	if ms <= 0 {
		delete(x.m.keys, a[1]) // already expired
	} else {
		k.expireAt = at
	}
	return intReply(1)
}

func cmdTime(x *simExec, _ []string) respValue {
	s := x.now / int64(time.Second)
	us := x.now % int64(time.Second) / int64(time.Microsecond)
	return respValue{kind: respArray, arr: []respValue{bulkReply(strconv.FormatInt(s, 10)), bulkReply(strconv.FormatInt(us, 10))}}
}

// cmdInfo answers INFO (any section: the scripts ask for "server") with
// Redis 7.0's Server section, as the master's clock and life make it. Its
// uptime_in_seconds is Redis's, server.unixtime − server.stat_starttime:
// the cached time of the command (of the script: x.now) in whole seconds,
// less the start time taken by time(NULL), whole seconds too, read off the
// coarse clock (stampLocked). It is not the time up rounded down: started
// at 10.9 s, read at 11.0 s, it says 1; started at 11.001 s, when the
// coarse clock still said 10.998 s, read at 13.0 s, it says 3: up to a
// second and a tick more than the master has been up. run_id is drawn anew
// at each (re)start. The fields no script reads are a build's, fixed.
func cmdInfo(x *simExec, _ []string) respValue {
	m := x.m
	sec := int64(time.Second)
	up := x.now/sec - m.stampLocked(m.startedAt)
	var b strings.Builder
	b.Grow(600)
	b.WriteString("# Server\r\n" +
		"redis_version:7.0.15\r\n" +
		"redis_git_sha1:00000000\r\n" +
		"redis_git_dirty:0\r\n" +
		"redis_build_id:ae4d7c971a948f0\r\n" +
		"redis_mode:standalone\r\n" +
		"os:Linux 6.1.0 x86_64\r\n" +
		"arch_bits:64\r\n" +
		"monotonic_clock:POSIX clock_gettime\r\n" +
		"multiplexing_api:epoll\r\n" +
		"atomicvar_api:c11-builtin\r\n" +
		"gcc_version:12.2.0\r\n")
	fmt.Fprintf(&b, "process_id:%d\r\n", 1000+m.id)
	b.WriteString("process_supervised:no\r\n")
	fmt.Fprintf(&b, "run_id:%s\r\n", m.runID)
	fmt.Fprintf(&b, "tcp_port:%d\r\n", 7000+m.id)
	fmt.Fprintf(&b, "server_time_usec:%d\r\n", x.now/int64(time.Microsecond))
	fmt.Fprintf(&b, "uptime_in_seconds:%d\r\n", up)
	fmt.Fprintf(&b, "uptime_in_days:%d\r\n", up/(3600*24))
	b.WriteString("hz:10\r\nconfigured_hz:10\r\n")
	// Redis's LRU clock: ms/1000 modulo 2^24.
	fmt.Fprintf(&b, "lru_clock:%d\r\n", x.now/sec&(1<<24-1))
	b.WriteString("executable:/usr/bin/redis-server\r\n" +
		"config_file:\r\n" +
		"io_threads_active:0\r\n")
	return bulkReply(b.String())
}

// cmdLastsave answers LASTSAVE as Redis does: the time(NULL) (the coarse
// clock's second, stampLocked) of the incarnation's last Save, else of its
// start (initServer), never one a snapshot brought back.
func cmdLastsave(x *simExec, _ []string) respValue {
	return intReply(max(x.m.lastsave, x.m.stampLocked(x.m.startedAt)))
}

func cmdType(x *simExec, a []string) respValue {
	k := x.lookup(a[1])
	if k == nil {
		return statusReply("none")
	}
	return statusReply(k.kind.String())
}

// hash returns key's hash, nil when missing, or a WRONGTYPE reply.
func (x *simExec) hash(key string) (*simKey, *respValue) {
	k := x.lookup(key)
	if k != nil && k.kind != kindHash {
		r := errReply(errWrongType)
		return nil, &r
	}
	return k, nil
}

func cmdHget(x *simExec, a []string) respValue {
	k, e := x.hash(a[1])
	if e != nil {
		return *e
	}
	if k != nil {
		if v, ok := k.hget(a[2]); ok {
			return bulkReply(v)
		}
	}
	return respValue{}
}

// cmdHmget is HMGET key field...: each field's value, nil when missing.
func cmdHmget(x *simExec, a []string) respValue {
	k, e := x.hash(a[1])
	if e != nil {
		return *e
	}
	r := respValue{kind: respArray, arr: make([]respValue, len(a)-2)}
	for i, f := range a[2:] {
		if k != nil {
			if v, ok := k.hget(f); ok {
				r.arr[i] = bulkReply(v)
			}
		}
	}
	return r
}

// cmdPttl is PTTL key: the ms left, -1 without an expiry, -2 when missing.
func cmdPttl(x *simExec, a []string) respValue {
	k := x.lookup(a[1])
	switch {
	case k == nil:
		return intReply(-2)
	case k.expireAt == 0:
		return intReply(-1)
	}
	return intReply(k.expireAt/int64(time.Millisecond) - x.now/int64(time.Millisecond))
}

func cmdHset(x *simExec, a []string) respValue {
	if len(a)%2 != 0 {
		return errReply("ERR wrong number of arguments for 'hset' command")
	}
	k, e := x.hash(a[1])
	if e != nil {
		return *e
	}
	if k == nil {
		k = &simKey{kind: kindHash, born: x.m.incarnation}
		x.m.keys[a[1]] = k
	}
	added := int64(0)
next:
	for i := 2; i < len(a); i += 2 {
		for j := range k.hash {
			if k.hash[j].name == a[i] {
				k.hash[j].value = a[i+1]
				continue next
			}
		}
		k.hash = append(k.hash, simField{a[i], a[i+1]})
		added++
	}
	return intReply(added)
}

func cmdHdel(x *simExec, a []string) respValue {
	k, e := x.hash(a[1])
	if e != nil {
		return *e
	}
	if k == nil {
		return intReply(0)
	}
	n := int64(0)
	for _, f := range a[2:] {
		if i := slices.IndexFunc(k.hash, func(x simField) bool { return x.name == f }); i >= 0 {
			k.hash = slices.Delete(k.hash, i, i+1)
			delete(k.holdBy, f)
			n++
		}
	}
	if len(k.hash) == 0 {
		delete(x.m.keys, a[1])
	}
	return intReply(n)
}

func cmdHgetall(x *simExec, a []string) respValue {
	k, e := x.hash(a[1])
	if e != nil {
		return *e
	}
	r := respValue{kind: respArray}
	if k != nil {
		r.arr = make([]respValue, 0, 2*len(k.hash))
		for _, f := range k.hash {
			r.arr = append(r.arr, bulkReply(f.name), bulkReply(f.value))
		}
	}
	return r
}

// zset returns key's sorted set, nil when missing, or a WRONGTYPE reply.
func (x *simExec) zset(key string) (*simKey, *respValue) {
	k := x.lookup(key)
	if k != nil && k.kind != kindZset {
		r := errReply(errWrongType)
		return nil, &r
	}
	return k, nil
}

// cmdZadd is ZADD key score member [score member ...].
func cmdZadd(x *simExec, a []string) respValue {
	switch strings.ToUpper(a[2]) {
	case "NX", "XX", "GT", "LT", "CH", "INCR":
		return x.shimFail("ZADD option %s is not simulated", a[2])
	}
	if (len(a)-2)%2 != 0 {
		return errReply(errSyntax)
	}
	scores := make([]float64, 0, (len(a)-2)/2)
	for i := 2; i < len(a); i += 2 {
		f, ok := redisFloat(a[i])
		if !ok {
			return errReply(errNotFloat)
		}
		scores = append(scores, f)
	}
	k, e := x.zset(a[1])
	if e != nil {
		return *e
	}
	if k == nil {
		k = &simKey{kind: kindZset, zset: map[string]float64{}, born: x.m.incarnation}
		x.m.keys[a[1]] = k
	}
	added := int64(0)
	for i, s := range scores {
		m := a[3+2*i]
		if _, ok := k.zset[m]; !ok {
			added++
		}
		k.zset[m] = s
	}
	if x.told {
		x.addedLast = true
	}
	return intReply(added)
}

func cmdZrem(x *simExec, a []string) respValue {
	k, e := x.zset(a[1])
	if e != nil {
		return *e
	}
	if k == nil {
		return intReply(0)
	}
	n := int64(0)
	for _, m := range a[2:] {
		if _, ok := k.zset[m]; ok {
			delete(k.zset, m)
			n++
		}
	}
	if len(k.zset) == 0 {
		delete(x.m.keys, a[1])
	}
	return intReply(n)
}

// members returns a sorted set's members in Redis's order: by score, then
// by their bytes.
func (k *simKey) members() []string {
	ms := make([]string, 0, len(k.zset))
	for m := range k.zset {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b string) int {
		if sa, sb := k.zset[a], k.zset[b]; sa != sb {
			if sa < sb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return ms
}

// cmdZrange is ZRANGE key start stop, by rank.
func cmdZrange(x *simExec, a []string) respValue {
	if len(a) > 4 {
		return x.shimFail("ZRANGE option %s is not simulated", a[4])
	}
	start, ok1 := redisInt(a[2])
	stop, ok2 := redisInt(a[3])
	if !ok1 || !ok2 {
		return errReply(errNotInt)
	}
	k, e := x.zset(a[1])
	if e != nil {
		return *e
	}
	r := respValue{kind: respArray}
	if k == nil {
		return r
	}
	n := int64(len(k.zset))
	if start < 0 {
		start += n
	}
	if stop < 0 {
		stop += n
	}
	start = max(start, 0)
	if start > stop || start >= n {
		return r
	}
	stop = min(stop, n-1)
	for _, m := range k.members()[start : stop+1] {
		r.arr = append(r.arr, bulkReply(m))
	}
	return r
}

// cmdZrangebyscore is ZRANGEBYSCORE key min max, inclusive bounds that are
// numbers or -inf/+inf (no '(' bounds, WITHSCORES or LIMIT).
func cmdZrangebyscore(x *simExec, a []string) respValue {
	if len(a) > 4 {
		return x.shimFail("ZRANGEBYSCORE option %s is not simulated", a[4])
	}
	bound := func(s string) (float64, bool) {
		switch strings.ToLower(s) {
		case "-inf":
			return math.Inf(-1), true
		case "+inf", "inf":
			return math.Inf(1), true
		}
		if strings.HasPrefix(s, "(") {
			return 0, false
		}
		return redisFloat(s)
	}
	lo, ok1 := bound(a[2])
	hi, ok2 := bound(a[3])
	if strings.HasPrefix(a[2], "(") || strings.HasPrefix(a[3], "(") {
		return x.shimFail("ZRANGEBYSCORE exclusive bounds are not simulated")
	}
	if !ok1 || !ok2 {
		return errReply("ERR min or max is not a float")
	}
	k, e := x.zset(a[1])
	if e != nil {
		return *e
	}
	r := respValue{kind: respArray}
	if k == nil {
		return r
	}
	for _, m := range k.members() {
		if sc := k.zset[m]; sc >= lo && sc <= hi {
			r.arr = append(r.arr, bulkReply(m))
		}
	}
	return r
}

// cmdPublish tells the channel's subscribers. It also keeps the wake
// statistics and the checker's handTo: a PUBLISH that follows a script's
// SET of a key hands that key to the channel.
func cmdPublish(x *simExec, a []string) respValue {
	n := x.m.publishLocked(a[1], a[2])
	handed := false
	for _, key := range x.fresh {
		if k := x.lookup(key); k != nil && k.kind == kindString {
			k.handTo, handed = a[1], true
		}
	}
	x.fresh = x.fresh[:0]
	switch {
	case n == 0:
		x.m.stats.Dropped++
	case handed:
		x.m.stats.Handoffs++
	default:
		x.m.stats.Wakes++
	}
	if n > 0 {
		x.told = true
	}
	return intReply(int64(n))
}

// cmdEval is EVAL script numkeys key... arg...
func cmdEval(x *simExec, a []string) respValue {
	nk, ok := redisInt(a[2])
	switch {
	case !ok:
		return errReply(errNotInt)
	case nk < 0:
		return errReply("ERR Number of keys can't be negative")
	case nk > int64(len(a)-3):
		return errReply("ERR Number of keys can't be greater than number of args")
	}
	return x.eval(a[1], a[3:3+nk], a[3+nk:])
}

// onScriptGoroutine runs f on the master's script goroutine and returns
// when f did (the master's lock held). A request runs there: the interpreter needs a
// deep stack (its pattern matcher recurses per character), and on the
// simulated network's goroutines, short-lived, each script would grow
// theirs by doublings, copying every frame each time; the script goroutine
// grows its own once.
func (m *Master) onScriptGoroutine(f func()) {
	if m.scripts == nil {
		m.scripts, m.scriptDone = make(chan func()), make(chan struct{})
		go func(work <-chan func(), done chan<- struct{}) {
			for f := range work {
				f()
				done <- struct{}{}
			}
		}(m.scripts, m.scriptDone)
	}
	m.scripts <- f
	<-m.scriptDone
}

// stopScripts ends the master's script goroutine, if it has one.
func (m *Master) StopScripts() {
	m.Lock()
	defer m.Unlock()
	if m.scripts != nil {
		close(m.scripts)
		m.scripts = nil
	}
}

// cmdArgs converts a go-redis command's arguments to the words sent, as
// go-redis writes them.
func cmdArgs(args []any) ([]string, error) {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			out[i] = ""
		case string:
			out[i] = v
		case []byte:
			out[i] = string(v)
		case int:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int8:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int16:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int32:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case uint:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint8:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint16:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint32:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint64:
			out[i] = strconv.FormatUint(v, 10)
		case float32:
			out[i] = strconv.FormatFloat(float64(v), 'f', -1, 64)
		case float64:
			out[i] = strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			out[i] = map[bool]string{true: "1", false: "0"}[v]
		case time.Duration:
			out[i] = strconv.FormatInt(v.Nanoseconds(), 10)
		default:
			return nil, fmt.Errorf("argument %d of type %T is not simulated", i, a)
		}
	}
	return out, nil
}

// simRedisError is an error reply, as go-redis hands it over.
type simRedisError string

func (e simRedisError) Error() string { return string(e) }
func (simRedisError) RedisError()     {}

var _ redis.Error = simRedisError("")

// respGo is a reply as go-redis's *redis.Cmd holds it.
func respGo(r respValue) any {
	switch r.kind {
	case respInt:
		return r.n
	case respBulk, respStatus:
		return r.s
	case respErr:
		return simRedisError(r.s)
	case respArray:
		out := make([]any, len(r.arr))
		for i, e := range r.arr {
			out[i] = respGo(e)
		}
		return out
	}
	return nil
}

// respReply is r as a Node hands the core a reply: a nil reply as nil, an
// error reply as Err.
func respReply(r respValue) (any, error) {
	switch r.kind {
	case respErr:
		return nil, simRedisError(r.s)
	case respNil:
		return nil, nil
	}
	return respGo(r), nil
}

// Result is what ExecLocked did.
type Result struct {
	// Reply and Err are the reply as a Node hands it to the core: nil for
	// a nil reply, an int64 for an integer, a string for a simple or bulk
	// string, a []any of these for an array; an error reply as Err (a
	// redis.Error).
	Reply any
	Err   error
	// Now is the master's clock (unix ns) when the command began.
	Now int64
	// ShimErr is what the command needed that the shim does not simulate
	// (Err then says so too); LuaErr the error a script raised (not an
	// error reply it returned).
	ShimErr, LuaErr error
	// Requeued: a script added to a sorted set after one of its PUBLISHes
	// reached a subscriber (a release queued its call again after it told
	// a waiter).
	Requeued bool
}

// ExecLocked runs the command args on the master, which must be up: its
// name, then its arguments (strings, []byte, integers, floats, bools or
// durations, written as go-redis writes them).
func (m *Master) ExecLocked(args []any) Result {
	x := simExec{m: m, now: m.ClockLocked()}
	var r respValue
	if words, err := cmdArgs(args); err != nil {
		r = x.shimFail("%v", err)
	} else {
		m.onScriptGoroutine(func() { r = x.dispatch(words) })
	}
	res := Result{Now: x.now, ShimErr: x.shimErr, LuaErr: x.luaErr, Requeued: x.addedLast}
	res.Reply, res.Err = respReply(r)
	return res
}

// KeyLocked returns key's value if it is a string key, and the
// incarnation of the master that made it (a restart with data or from a
// snapshot keeps a key's); ok false if key does not exist.
func (m *Master) KeyLocked(key string) (value string, born int, ok bool) {
	x := simExec{m: m, now: m.ClockLocked()}
	k := x.lookup(key)
	if k == nil {
		return "", 0, false
	}
	return k.str, k.born, true
}

// KeyView is a key as TYPE, GET, HGETALL, ZRANGE WITHSCORES and PTTL show
// it.
type KeyView struct {
	Kind   string // TYPE's: "none", "string", "hash", "zset"
	Str    string
	Hash   map[string]string
	Zset   []redis.Z
	PTTLMs int64 // -1: no TTL; -2: no key
}

func (v KeyView) String() string {
	return fmt.Sprintf("%s %q %v %v pttl %dms", v.Kind, v.Str, v.Hash, v.Zset, v.PTTLMs)
}

// View returns key as it is now.
func (m *Master) View(name string) KeyView {
	m.Lock()
	defer m.Unlock()
	x := simExec{m: m, now: m.ClockLocked()}
	k := x.lookup(name)
	if k == nil {
		return KeyView{Kind: "none", PTTLMs: -2}
	}
	v := KeyView{Kind: k.kind.String(), Str: k.str, PTTLMs: -1}
	if k.expireAt != 0 {
		v.PTTLMs = (k.expireAt - x.now) / int64(time.Millisecond)
	}
	if k.kind == kindHash {
		v.Hash = map[string]string{}
		for _, f := range k.hash {
			v.Hash[f.name] = f.value
		}
	}
	for _, mem := range k.members() {
		v.Zset = append(v.Zset, redis.Z{Score: k.zset[mem], Member: mem})
	}
	return v
}
