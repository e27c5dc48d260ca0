package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// The simulated master is only worth what its semantics are: these tests
// run the same commands on a real redis-server and on a Master and hold
// the two to the same replies. The root's sim_test.go holds the master to
// redis-server for the requests the core builds (TestSimMasterAgreesWithRedis,
// TestSimMasterQueuesAgreeWithRedis).

// server is a redis-server process for the tests; each test uses keys of
// its own.
var server *redistest.Cluster

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(redistest.Main(m, 1, redistest.Options{}, func(c *redistest.Cluster) { server = c }))
}

// TestSimLuaAgreesWithRedis runs small scripts that meet each rule of
// Redis's conversions between Lua and RESP — a script's reply to the
// client (numbers truncated, arrays cut at the first nil, ok and err
// tables, booleans by protocol), a command's reply to the script (nil as
// false, status and error tables, redis.call raising, redis.pcall not),
// numbers passed as arguments, error_reply's and status_reply's forms,
// globals protection — on a real redis-server and in the sim's Lua, over
// RESP3 (go-redis's default) and RESP2, and checks that go-redis reads the
// same value or error from both.
func TestSimLuaAgreesWithRedis(t *testing.T) {
	ctx := context.Background()
	addr := server.Addrs()[0]
	k := t.Name()
	scripts := []string{
		`return 3.99`,
		`return -3.99`,
		`return 'x'`,
		`return true`,
		`return false`,
		`return nil`,
		`return {1, 'a', {2, 'b'}, 3}`,
		`return {1, false, 3}`,
		`return {1, nil, 3}`,
		`return {true, 2.5}`,
		`return {ok='fine'}`,
		`return {err='ERR bad'}`,
		`return {err='bad thing'}`,
		`return {err='-CODE with dash'}`,
		`return {1, {err='inner'}}`,
		`return redis.error_reply('oops')`,
		`return redis.error_reply('my error')`,
		`return redis.error_reply('-X y')`,
		`return redis.error_reply('trail\r\n')`,
		`return redis.error_reply(1)`,
		`return redis.error_reply('x').err`,
		`return redis.error_reply('my error').err`,
		`return redis.status_reply('S')`,
		`return redis.status_reply('S').ok`,
		`return redis.call('SET', KEYS[1], 'v')`,
		`return redis.call('SET', KEYS[1], 'v').ok`,
		`return redis.call('GET', KEYS[2])`,
		`return type(redis.call('GET', KEYS[2]))`,
		`return redis.call('TYPE', KEYS[1]).ok`,
		`return redis.call('TYPE', KEYS[2]).ok`,
		`return redis.pcall('HGET', KEYS[1], 'f')`,
		`return redis.pcall('HGET', KEYS[1], 'f').err`,
		`return redis.call('HGET', KEYS[1], 'f')`,
		`return redis.pcall('GET')`,
		`return redis.pcall('GET').err`,
		`return redis.pcall('GET', KEYS[1], 'extra').err`,
		`return redis.pcall().err`,
		`return redis.pcall('SET', KEYS[1], {}).err`,
		`return redis.pcall('SET', KEYS[1], 'v', 'PX', 0).err`,
		`return redis.pcall('SET', KEYS[1], 'v', 'PX', '01').err`,
		`return redis.pcall('SET', KEYS[1], 'v', 'PX', 10, 'NX', 'XX').err`,
		`return redis.pcall('PEXPIRE', KEYS[1], 'x').err`,
		`return redis.pcall('ZADD', KEYS[3], 'x', 'm').err`,
		`return redis.pcall('ZADD', KEYS[3], 1).err`,
		`return redis.pcall('HSET', KEYS[3], 'f').err`,
		`redis.call('SET', KEYS[1], 0.1) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], 1.5) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], 12345678901234567) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], 1e20) return redis.call('GET', KEYS[1])`,
		`redis.call('SET', KEYS[1], -7) return redis.call('GET', KEYS[1])`,
		`return tostring(1e15) .. ' ' .. tostring(0.1) .. ' ' .. tostring(123) .. ' ' .. tostring(-2.5)`,
		`return string.format('%.0f', 1234567890123456)`,
		`redis.call('DEL', KEYS[3]) redis.call('ZADD', KEYS[3], 2, 'b', 1, 'c', 1, 'a', '-inf', 'z') return redis.call('ZRANGE', KEYS[3], 0, -1)`,
		`return redis.call('ZRANGE', KEYS[3], -2, 10)`,
		`return redis.call('ZRANGE', KEYS[3], 3, 1)`,
		`return redis.call('ZREM', KEYS[3], 'a', 'nope')`,
		`redis.call('DEL', KEYS[4]) return {redis.call('HSET', KEYS[4], 'a', '1', 'b', '2'), redis.call('HSET', KEYS[4], 'a', '3')}`,
		`return redis.call('HGETALL', KEYS[4])`,
		`return {redis.call('HDEL', KEYS[4], 'a', 'b', 'c'), redis.call('TYPE', KEYS[4]).ok}`,
		`return {redis.call('PEXPIRE', KEYS[2], 100), redis.call('PEXPIRE', KEYS[1], 0), redis.call('TYPE', KEYS[1]).ok}`,
		`redis.call('SET', KEYS[1], 'v') return {redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[1]), redis.call('EXISTS', KEYS[2])}`,
		`return {redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]), #redis.call('TIME')}`,
		`return undefined_global`,
		`x = 1 return x`,
		`return redis.call('EVAL', 'return 1', 0)`,
		`return nil .. 'x'`,
		`return 'unterminated`,
		// Patterns: string.find and string.match are Lua 5.1's (luapat.go).
		`return {string.match('redlock:wake:ab/3|hAnD|150|12', '^([^|]*)|([^|]+)|(%d+)|(%d+)$')}`,
		`return {string.match('plainchannel', '^([^|]*)|([^|]+)|(%d+)|(%d+)$')}`,
		`return {string.match('c||150|12', '^([^|]*)|([^|]+)|(%d+)|(%d+)$')}`,
		`return {string.match('ch|h|150|12', '(%d+)$')}`,
		`return {('x|h|12a'):match('(%d+)$')}`,
		`return {string.find('hello world', 'o w')}`,
		`return {string.find('hello', 'l+')}`,
		`return {string.find('a.b', '.', 1, true)}`,
		`return {string.find('a.b', '%.')}`,
		`return {string.find('abc', 'b', -1)}`,
		`return {string.find('abc', 'b', -10)}`,
		`return {string.find('abc', '', 10)}`,
		`return {string.find('abc', '', 4)}`,
		`return {string.find('a+b', '+', 1, true)}`,
		`return {string.find('a+b', 'a+b')}`,
		`return {string.find('key=val', '(%w+)=(%w+)')}`,
		`return {string.match('key = value', '(%w+)%s*=%s*(%w+)')}`,
		`return {string.match('hello', '()ll()')}`,
		`return {string.match('abcabc', '(a)(b)c%1%2')}`,
		`return {string.match('THE (quick) fox', '%((%a+)%)')}`,
		`return {string.match('x(a(b)c)y', '%b()')}`,
		`return {string.match('THE quick', '%f[%a]%a+', 4)}`,
		`return {string.match('  trim  ', '^%s*(.-)%s*$')}`,
		`return {string.match('aaa', 'a-b')}`,
		`return {string.match('aaab', 'a-b')}`,
		`return {string.match('x]y', '[]]')}`,
		`return {string.match('a-z', '[a%-z]+')}`,
		`return {string.match('f00', '[^%d]+')}`,
		`return {string.match('CamelCase', '%u%l+', 2)}`,
		`return {string.match('a,b;c', '[,;]')}`,
		`return {string.match('a1.5', '%d%.%d')}`,
		`return {string.match(12345, '%d%d')}`,
		`return {string.match('a\0b', '%z(.)')}`,
		`return {string.match('ab?', 'b?%?')}`,
		`return {string.match('x9_!', '[%w_]+'), string.match('x9_!', '%p'), string.match('\t x', '%s+()'), string.match('AbC', '%U+')}`,
		`return {string.match('ab', '()()a')}`,
		`return #string.match(string.rep('a', 300) .. 'b', '(a*)b')`,
		`return string.match('x', '[')`,
		`return string.match('x', '%')`,
		`return string.match('x', '(x')`,
		`return string.match('x', 'x)')`,
		`return string.match('x', '%1')`,
		`return string.match('xx', '()x%1')`,
		`return ...`,
		`return select('#', ...)`,
	}
	for _, proto := range []int{3, 2} {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		sim := NewMaster(0, time.Now(), 0, 1)
		t.Cleanup(sim.StopScripts)
		keys := []string{k + ":1", k + ":2", k + ":3", k + ":4"}
		for _, src := range scripts {
			args := append([]any{"eval", src, len(keys)}, toAny(keys)...)
			rc := redis.NewCmd(ctx, args...)
			_ = c.Process(ctx, rc)
			sc := redis.NewCmd(ctx, args...)
			sim.Lock()
			x := simExec{m: sim, now: sim.ClockLocked()}
			words, err := cmdArgs(sc.Args())
			if err != nil {
				t.Fatal(err)
			}
			if err := setCmdReply(sc, x.dispatch(words)); err != nil {
				t.Fatal(err)
			}
			sim.Unlock()
			if x.shimErr != nil {
				t.Errorf("RESP%d %s: the shim failed: %v", proto, src, x.shimErr)
				continue
			}
			rv, rerr := rc.Result()
			sv, serr := sc.Result()
			if !sameReply(rv, sv) || !sameError(rerr, serr) {
				t.Errorf("RESP%d %s:\n  redis %#v, %v\n  sim   %#v, %v", proto, src, rv, rerr, sv, serr)
			}
		}
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// sameReply compares go-redis values, an error element by its text.
func sameReply(a, b any) bool {
	as, ok1 := a.([]any)
	bs, ok2 := b.([]any)
	if ok1 && ok2 {
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			if !sameReply(as[i], bs[i]) {
				return false
			}
		}
		return true
	}
	if ea, ok := a.(error); ok {
		eb, ok := b.(error)
		return ok && ea.Error() == eb.Error()
	}
	return reflect.DeepEqual(a, b)
}

// sameError compares redis's error a with the sim's b: by their text,
// except for an error the script raised (" script: <sha1>, on
// @user_script:N." follows it), whose text up to there is the same when
// redis.call raised it and only its code (ERR) when the interpreter did:
// gopher-lua words its errors, line numbers and compile errors its own way.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if errors.Is(a, redis.Nil) || errors.Is(b, redis.Nil) {
		return errors.Is(a, redis.Nil) && errors.Is(b, redis.Nil)
	}
	as, bs := a.Error(), b.Error()
	const compiling = "ERR Error compiling script"
	if strings.HasPrefix(as, compiling) {
		return strings.HasPrefix(bs, compiling)
	}
	ra, _, raised := strings.Cut(as, " script: ")
	if !raised {
		return as == bs
	}
	rb, _, _ := strings.Cut(bs, " script: ")
	if strings.HasPrefix(ra, "ERR user_script:") {
		return strings.HasPrefix(rb, "ERR ")
	}
	return ra == rb
}

// TestSimInfoAgreesWithRedis: the sim's INFO server has Redis's shape — the
// section's header, then field:value lines, each ending in CRLF, its
// fields in the order a redis-server gives them (the installed one may
// have more), a run_id of 40 hex digits — and counts uptime_in_seconds as
// Redis 7.0 does (server.unixtime − server.stat_starttime, both whole
// seconds, the start stamped by time(NULL) off the coarse clock): 75 ms
// after a start at 10.9 s of the clock it reads 1.
func TestSimInfoAgreesWithRedis(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: server.Addrs()[0], MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	real, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	sim := NewMaster(0, time.Now(), 0, 1)
	t.Cleanup(sim.StopScripts)
	info := func(start, now time.Duration) string {
		sim.Lock()
		defer sim.Unlock()
		sim.startedAt = int64(start)
		x := simExec{m: sim, now: int64(now)}
		return cmdInfo(&x, []string{"info", "server"}).s
	}
	fields := func(who, s string) []string {
		t.Helper()
		body, ok := strings.CutPrefix(s, "# Server\r\n")
		if !ok || !strings.HasSuffix(body, "\r\n") {
			t.Fatalf("%s INFO server = %q; want \"# Server\\r\\n\" then lines ending in CRLF", who, s)
		}
		var names []string
		for l := range strings.SplitSeq(strings.TrimSuffix(body, "\r\n"), "\r\n") {
			name, v, ok := strings.Cut(l, ":")
			if !ok || strings.ContainsAny(l, "\r\n") {
				t.Fatalf("%s INFO server line %q is not field:value", who, l)
			}
			if name == "run_id" && (len(v) != 40 || strings.Trim(v, "0123456789abcdef") != "") {
				t.Errorf("%s run_id %q; want 40 hex digits", who, v)
			}
			names = append(names, name)
		}
		return names
	}
	rn := fields("redis", real)
	sn := fields("sim", info(0, time.Hour))
	i := 0
	for _, n := range sn {
		for i < len(rn) && rn[i] != n {
			i++
		}
		if i == len(rn) {
			t.Fatalf("the sim's INFO server field %q is not in redis's, or out of its order: sim %v, redis %v", n, sn, rn)
		}
	}
	for _, tc := range []struct {
		start, now time.Duration
		want       string
	}{
		{10*time.Second + 900*time.Millisecond, 11*time.Second + 75*time.Millisecond, "uptime_in_seconds:1\r\n"},
		{10*time.Second + 900*time.Millisecond, 11*time.Second + 899*time.Millisecond, "uptime_in_seconds:1\r\n"},
		{10*time.Second + 900*time.Millisecond, 10*time.Second + 999*time.Millisecond, "uptime_in_seconds:0\r\n"},
		{10*time.Second + 2*time.Millisecond, 12*time.Second - time.Nanosecond, "uptime_in_seconds:1\r\n"},
		{10*time.Second + 2*time.Millisecond, 3*24*time.Hour + 11*time.Second, "uptime_in_seconds:259201\r\nuptime_in_days:3\r\n"},
		// Master 0's coarse clock ticks 1.3 ms after each multiple of 4 ms:
		// started 1 ms after a second turned, it stamps the second before.
		{11*time.Second + time.Millisecond, 13 * time.Second, "uptime_in_seconds:3\r\n"},
		{11*time.Second + 4*time.Millisecond, 13 * time.Second, "uptime_in_seconds:2\r\n"},
	} {
		if got := info(tc.start, tc.now); !strings.Contains(got, tc.want) {
			t.Errorf("started at %v, INFO at %v: %q; want it to hold %q", tc.start, tc.now, got, tc.want)
		}
	}
}

// setCmdReply hands r to cmd as go-redis would have read it.
func setCmdReply(cmd redis.Cmder, r respValue) error {
	if r.kind == respErr {
		cmd.SetErr(simRedisError(r.s))
		return nil
	}
	if r.kind == respNil {
		cmd.SetErr(redis.Nil)
		return nil
	}
	switch c := cmd.(type) {
	case *redis.StatusCmd:
		switch r.kind {
		case respStatus, respBulk:
			c.SetVal(r.s)
		case respInt:
			c.SetVal(strconv.FormatInt(r.n, 10))
		default:
			return fmt.Errorf("sim: a %T cannot read a reply of kind %d", cmd, r.kind)
		}
	case *redis.Cmd:
		c.SetVal(respGo(r))
	default:
		return fmt.Errorf("sim: replies to a %T are not simulated (internal/sim)", cmd)
	}
	return nil
}
