package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// The Lua side of EVAL: a Lua 5.1 interpreter (gopher-lua) with the
// libraries Redis opens, its redis table (call, pcall, error_reply,
// status_reply, sha1hex, log), globals protection, and the conversions
// between Lua values and RESP replies as Redis 7.0 makes them; string.find
// and string.match are Lua 5.1's own (luapat.go).

// simScript is a compiled script, shared by every Lua state.
type simScript struct {
	proto *lua.FunctionProto
	name  string // its SHA1, as Redis names it in errors
	err   error
}

var simScripts sync.Map // script text → *simScript

func compileScript(src string) *simScript {
	if s, ok := simScripts.Load(src); ok {
		return s.(*simScript)
	}
	sum := sha1.Sum([]byte(src))
	s := &simScript{name: hex.EncodeToString(sum[:])}
	chunk, err := parse.Parse(strings.NewReader(src), "user_script")
	if err == nil {
		if s.proto, err = lua.Compile(chunk, "user_script"); err == nil {
			// Lua 5.1 gives a chunk that does not use '...' a local 'arg'
			// table (LUA_COMPAT_VARARG); making it costs gopher-lua two maps
			// per call, a third of the simulation's garbage. Here 'arg' is
			// nil.
			s.proto.IsVarArg &^= lua.VarArgNeedsArg
		}
	}
	s.err = err
	v, _ := simScripts.LoadOrStore(src, s)
	return v.(*simScript)
}

// simLua is a Lua state with Redis's libraries and its redis table, which
// run the commands of whichever request x is running. States are reused
// (simLuaFree): a script leaves nothing behind (globals are read-only, as
// in Redis).
type simLua struct {
	L    *lua.LState
	x    *simExec
	args []string
}

// simLuaFree holds the states no script is running in: as many as ran at
// once. Not a sync.Pool: that one drops its states at every GC, and a
// quarter of them on every Put under -race, and a new state costs far more
// than a script.
var simLuaFree struct {
	sync.Mutex
	states []*simLua
}

func getSimLua() *simLua {
	simLuaFree.Lock()
	defer simLuaFree.Unlock()
	if n := len(simLuaFree.states); n > 0 {
		s := simLuaFree.states[n-1]
		simLuaFree.states = simLuaFree.states[:n-1]
		return s
	}
	return newSimLua()
}

func putSimLua(s *simLua) {
	simLuaFree.Lock()
	defer simLuaFree.Unlock()
	simLuaFree.states = append(simLuaFree.states, s)
}

func newSimLua() *simLua {
	s := &simLua{L: lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 200,
		RegistrySize: 1024, RegistryGrowStep: 256, RegistryMaxSize: 1 << 20})}
	L := s.L
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	for _, f := range []string{"loadfile", "dofile", "_printregs"} {
		g.RawSetString(f, lua.LNil) // as Redis removes them
	}
	// tostring as Lua 5.1 writes numbers (%.14g).
	g.RawSetString("tostring", L.NewFunction(func(L *lua.LState) int {
		v := L.CheckAny(1)
		if n, ok := v.(lua.LNumber); ok {
			L.Push(lua.LString(luaNumber14(float64(n))))
		} else {
			L.Push(L.ToStringMeta(v))
		}
		return 1
	}))
	strlib := g.RawGetString("string").(*lua.LTable)
	strlib.RawSetString("find", L.NewFunction(func(L *lua.LState) int { return luaStrFindAux(L, true) }))
	strlib.RawSetString("match", L.NewFunction(func(L *lua.LState) int { return luaStrFindAux(L, false) }))
	r := L.NewTable()
	r.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return s.call(L, true) }))
	r.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return s.call(L, false) }))
	r.RawSetString("error_reply", L.NewFunction(luaErrorReply))
	r.RawSetString("status_reply", L.NewFunction(luaStatusReply))
	r.RawSetString("sha1hex", L.NewFunction(func(L *lua.LState) int {
		sum := sha1.Sum([]byte(L.CheckString(1)))
		L.Push(lua.LString(hex.EncodeToString(sum[:])))
		return 1
	}))
	r.RawSetString("log", L.NewFunction(func(*lua.LState) int { return 0 }))
	for i, n := range []string{"LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"} {
		r.RawSetString(n, lua.LNumber(i))
	}
	g.RawSetString("redis", r)
	// Globals protection: reading a global that does not exist, or
	// writing one, is an error.
	mt := L.NewTable()
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckString(2))
		return 0
	}))
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	L.SetMetatable(g, mt)
	return s
}

// luaNumber14 is a number as Lua 5.1 writes it ("%.14g").
func luaNumber14(f float64) string { return luaNumber(f, "%.14g") }

// luaNumberArg is a number passed to redis.call as Redis 7.0 writes it
// ("%.17g").
func luaNumberArg(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatInt(int64(f), 10)
	}
	return luaNumber(f, "%.17g")
}

// luaNumber is f in format, but the infinities and NaN as Lua writes them.
func luaNumber(f float64, format string) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return fmt.Sprintf(format, f)
}

// redisErrorText is the text of the error table Redis makes from err:
// "-CODE msg" or "msg" (code ERR, as is a "-word" without a space), with
// \r and \n trimmed from the message.
func redisErrorText(err string) string {
	code, msg := "ERR", err
	if rest, ok := strings.CutPrefix(err, "-"); ok {
		if c, m, ok := strings.Cut(rest, " "); ok {
			code, msg = c, m
		} else {
			msg = rest
		}
	}
	return code + " " + strings.Trim(msg, "\r\n")
}

func luaErrorTable(L *lua.LState, text string) *lua.LTable {
	t := L.CreateTable(0, 1)
	t.RawSetString("err", lua.LString(text))
	return t
}

func luaErrorReply(L *lua.LState) int {
	s, ok := L.Get(1).(lua.LString)
	if L.GetTop() != 1 || !ok {
		L.Push(luaErrorTable(L, redisErrorText("wrong number or type of arguments")))
		return 1
	}
	e := string(s)
	if !strings.HasPrefix(e, "-") {
		e = "-" + e
	}
	L.Push(luaErrorTable(L, redisErrorText(e)))
	return 1
}

func luaStatusReply(L *lua.LState) int {
	s, ok := L.Get(1).(lua.LString)
	if L.GetTop() != 1 || !ok {
		L.Push(luaErrorTable(L, redisErrorText("wrong number or type of arguments")))
		return 1
	}
	t := L.CreateTable(0, 1)
	t.RawSetString("ok", s)
	L.Push(t)
	return 1
}

// call is redis.call (raise) and redis.pcall: it runs a command and
// converts its reply to Lua (an error reply: a table {err=...}, raised by
// redis.call). What the shim does not simulate is raised either way.
func (s *simLua) call(L *lua.LState, raise bool) int {
	fail := func(text string) int {
		t := luaErrorTable(L, text)
		if raise {
			L.Error(t, 1)
			return 0
		}
		L.Push(t)
		return 1
	}
	n := L.GetTop()
	if n == 0 {
		return fail("ERR Please specify at least one argument for this redis lib call")
	}
	args := s.args[:0]
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args = append(args, string(v))
		case lua.LNumber:
			args = append(args, luaNumberArg(float64(v)))
		default:
			return fail("ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	s.args = args
	r := s.x.dispatch(args)
	clear(s.args) // the strings are the script's; let them go
	if err := s.x.shimErr; err != nil {
		L.RaiseError("%v", err)
	}
	if r.kind == respErr {
		return fail(redisErrorText("-" + r.s))
	}
	L.Push(respToLua(L, r))
	return 1
}

// respToLua converts a command's reply to Lua (RESP2 rules, the scripts'
// default): integer → number, bulk → string, nil → false, status → {ok=},
// error → {err=}, array → table (a nil element → false).
func respToLua(L *lua.LState, r respValue) lua.LValue {
	switch r.kind {
	case respInt:
		return lua.LNumber(r.n)
	case respBulk:
		return lua.LString(r.s)
	case respStatus:
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(r.s))
		return t
	case respErr:
		return luaErrorTable(L, r.s)
	case respArray:
		t := L.CreateTable(len(r.arr), 0)
		for i, e := range r.arr {
			t.RawSetInt(i+1, respToLua(L, e))
		}
		return t
	}
	return lua.LFalse
}

// luaToResp converts a script's reply as Redis does: number → integer
// (truncated), string → bulk, a table with err → error, with ok → status,
// else an array up to its first nil; true → 1; false and nil → nil. Redis
// 7.0 converts so over RESP3 connections too (TestSimLuaAgreesWithRedis),
// unless the script called redis.setresp(3), which the shim does not have.
func luaToResp(v lua.LValue) respValue {
	switch v := v.(type) {
	case lua.LNumber:
		return intReply(int64(v))
	case lua.LString:
		return bulkReply(string(v))
	case lua.LBool:
		if v {
			return intReply(1)
		}
	case *lua.LTable:
		if e, ok := v.RawGetString("err").(lua.LString); ok {
			return errReply(crlfToSpace.Replace(string(e)))
		}
		if s, ok := v.RawGetString("ok").(lua.LString); ok {
			return statusReply(string(s))
		}
		r := respValue{kind: respArray}
		for i := 1; ; i++ {
			e := v.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			r.arr = append(r.arr, luaToResp(e))
		}
		return r
	}
	return respValue{}
}

// crlfToSpace: an error reply is one line.
var crlfToSpace = strings.NewReplacer("\r", " ", "\n", " ")

// eval runs a script with its KEYS and ARGV.
func (x *simExec) eval(src string, keys, argv []string) respValue {
	sc := compileScript(src)
	if sc.err != nil {
		return errReply("ERR Error compiling script (new function): " + sc.err.Error())
	}
	s := getSimLua()
	defer putSimLua(s)
	L := s.L
	s.x, x.inScript = x, true
	defer func() { s.x, x.inScript = nil, false }()
	g := L.G.Global
	g.RawSetString("KEYS", luaArray(L, keys))
	g.RawSetString("ARGV", luaArray(L, argv))
	L.Push(L.NewFunctionFromProto(sc.proto))
	err := L.PCall(0, 1, nil)
	defer L.SetTop(0)
	if err != nil {
		var ae *lua.ApiError
		text := err.Error()
		if errors.As(err, &ae) {
			if t, ok := ae.Object.(*lua.LTable); ok {
				if e, ok := t.RawGetString("err").(lua.LString); ok {
					text = string(e)
				}
			} else {
				text = "ERR " + ae.Object.String()
			}
			if ae.Type == lua.ApiErrorPanic && x.shimErr == nil {
				x.shimErr = fmt.Errorf("sim: the Lua shim panicked: %v", ae.Object)
			}
		}
		if x.luaErr == nil {
			x.luaErr = fmt.Errorf("script %s raised: %s", sc.name, text)
		}
		return errReply(text + " script: " + sc.name)
	}
	return luaToResp(L.Get(-1))
}

func luaArray(L *lua.LState, vs []string) *lua.LTable {
	t := L.CreateTable(len(vs), 0)
	for i, v := range vs {
		t.RawSetInt(i+1, lua.LString(v))
	}
	return t
}
