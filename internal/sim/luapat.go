package sim

import (
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// string.find and string.match for the simulated masters' Lua, ported from
// Lua 5.1.5's lstrlib.c (MIT licence, Copyright © 1994–2012 Lua.org,
// PUC-Rio), the library Redis embeds. gopher-lua has its own matcher,
// another algorithm that parses and compiles the pattern on every call and
// allocates per character: 8 to 18 µs for the release scripts' patterns,
// most of the simulation's time in scripts. This one is Redis's, line for
// line (TestSimLuaAgreesWithRedis holds it to a real redis-server).
// string.gmatch and string.gsub, which no script uses, stay gopher-lua's.

const (
	luaMaxCaptures = 32
	capUnfinished  = -1
	capPosition    = -2
	luaSpecials    = "^$*+?.([%-"
)

// luaMatchState is lstrlib.c's MatchState: src and pat stand for the C
// strings, a position at their end reads as their terminating '\0'.
type luaMatchState struct {
	L     *lua.LState
	src   string
	pat   string
	level int
	capt  [luaMaxCaptures]struct{ init, len int }
}

func (ms *luaMatchState) p(i int) byte {
	if i < len(ms.pat) {
		return ms.pat[i]
	}
	return 0
}

func (ms *luaMatchState) s(i int) byte {
	if i < len(ms.src) {
		return ms.src[i]
	}
	return 0
}

func (ms *luaMatchState) checkCapture(l int) int {
	l -= '1'
	if l < 0 || l >= ms.level || ms.capt[l].len == capUnfinished {
		ms.L.RaiseError("invalid capture index")
	}
	return l
}

func (ms *luaMatchState) captureToClose() int {
	for level := ms.level - 1; level >= 0; level-- {
		if ms.capt[level].len == capUnfinished {
			return level
		}
	}
	ms.L.RaiseError("invalid pattern capture")
	return 0
}

func (ms *luaMatchState) classEnd(p int) int {
	c := ms.p(p)
	p++
	switch c {
	case '%':
		if ms.p(p) == 0 {
			ms.L.RaiseError("malformed pattern (ends with '%%')")
		}
		return p + 1
	case '[':
		if ms.p(p) == '^' {
			p++
		}
		for { // look for a ']'
			if ms.p(p) == 0 {
				ms.L.RaiseError("malformed pattern (missing ']')")
			}
			c := ms.p(p)
			p++
			if c == '%' && ms.p(p) != 0 {
				p++ // skip escapes (e.g. '%]')
			}
			if ms.p(p) == ']' {
				break
			}
		}
		return p + 1
	}
	return p
}

// luaMatchClass is match_class, with C's ctype in the "C" locale.
func luaMatchClass(c, cl byte) bool {
	var res bool
	switch cl | 0x20 { // tolower, for letters
	case 'a':
		res = 'a' <= c|0x20 && c|0x20 <= 'z'
	case 'c':
		res = c < 32 || c == 127
	case 'd':
		res = '0' <= c && c <= '9'
	case 'l':
		res = 'a' <= c && c <= 'z'
	case 'p':
		res = c > 32 && c < 127 && !('0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'z')
	case 's':
		res = c == ' ' || '\t' <= c && c <= '\r'
	case 'u':
		res = 'A' <= c && c <= 'Z'
	case 'w':
		res = '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'z'
	case 'x':
		res = '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if 'a' <= cl && cl <= 'z' { // islower
		return res
	}
	return !res
}

// matchBracketClass: p is the '[', ec the ']'.
func (ms *luaMatchState) matchBracketClass(c byte, p, ec int) bool {
	sig := true
	if ms.p(p+1) == '^' {
		sig = false
		p++
	}
	for p++; p < ec; p++ {
		switch {
		case ms.p(p) == '%':
			p++
			if luaMatchClass(c, ms.p(p)) {
				return sig
			}
		case ms.p(p+1) == '-' && p+2 < ec:
			p += 2
			if ms.p(p-2) <= c && c <= ms.p(p) {
				return sig
			}
		case ms.p(p) == c:
			return sig
		}
	}
	return !sig
}

func (ms *luaMatchState) singleMatch(c byte, p, ep int) bool {
	switch ms.p(p) {
	case '.':
		return true
	case '%':
		return luaMatchClass(c, ms.p(p+1))
	case '[':
		return ms.matchBracketClass(c, p, ep-1)
	}
	return ms.p(p) == c
}

func (ms *luaMatchState) matchBalance(s, p int) int {
	if ms.p(p) == 0 || ms.p(p+1) == 0 {
		ms.L.RaiseError("unbalanced pattern")
	}
	if ms.s(s) != ms.p(p) {
		return -1
	}
	b, e, cont := ms.p(p), ms.p(p+1), 1
	for s++; s < len(ms.src); s++ {
		if ms.src[s] == e {
			if cont--; cont == 0 {
				return s + 1
			}
		} else if ms.src[s] == b {
			cont++
		}
	}
	return -1
}

func (ms *luaMatchState) maxExpand(s, p, ep int) int {
	i := 0
	for s+i < len(ms.src) && ms.singleMatch(ms.src[s+i], p, ep) {
		i++
	}
	for ; i >= 0; i-- { // try with the most repetitions first
		if res := ms.match(s+i, ep+1); res >= 0 {
			return res
		}
	}
	return -1
}

func (ms *luaMatchState) minExpand(s, p, ep int) int {
	for {
		if res := ms.match(s, ep+1); res >= 0 {
			return res
		}
		if s < len(ms.src) && ms.singleMatch(ms.src[s], p, ep) {
			s++
		} else {
			return -1
		}
	}
}

func (ms *luaMatchState) startCapture(s, p, what int) int {
	level := ms.level
	if level >= luaMaxCaptures {
		ms.L.RaiseError("too many captures")
	}
	ms.capt[level].init, ms.capt[level].len = s, what
	ms.level = level + 1
	res := ms.match(s, p)
	if res < 0 {
		ms.level--
	}
	return res
}

func (ms *luaMatchState) endCapture(s, p int) int {
	l := ms.captureToClose()
	ms.capt[l].len = s - ms.capt[l].init
	res := ms.match(s, p)
	if res < 0 {
		ms.capt[l].len = capUnfinished
	}
	return res
}

func (ms *luaMatchState) matchCapture(s int, l byte) int {
	i := ms.checkCapture(int(l))
	c := ms.capt[i]
	// A position capture's length (-2) is huge as C's size_t: no match.
	if c.len >= 0 && len(ms.src)-s >= c.len && ms.src[c.init:c.init+c.len] == ms.src[s:s+c.len] {
		return s + c.len
	}
	return -1
}

// match returns the end of the match of pat[p:] at src[s:], or -1.
func (ms *luaMatchState) match(s, p int) int {
	for {
		switch ms.p(p) {
		case '(':
			if ms.p(p+1) == ')' {
				return ms.startCapture(s, p+2, capPosition)
			}
			return ms.startCapture(s, p+1, capUnfinished)
		case ')':
			return ms.endCapture(s, p+1)
		case 0:
			return s
		case '%':
			switch ms.p(p + 1) {
			case 'b':
				if s = ms.matchBalance(s, p+2); s < 0 {
					return -1
				}
				p += 4
				continue
			case 'f':
				p += 2
				if ms.p(p) != '[' {
					ms.L.RaiseError("missing '[' after '%%f' in pattern")
				}
				ep := ms.classEnd(p)
				var prev byte
				if s > 0 {
					prev = ms.src[s-1]
				}
				if ms.matchBracketClass(prev, p, ep-1) || !ms.matchBracketClass(ms.s(s), p, ep-1) {
					return -1
				}
				p = ep
				continue
			}
			if d := ms.p(p + 1); '0' <= d && d <= '9' {
				if s = ms.matchCapture(s, d); s < 0 {
					return -1
				}
				p += 2
				continue
			}
		case '$':
			if ms.p(p+1) == 0 {
				if s == len(ms.src) {
					return s
				}
				return -1
			}
		}
		// A pattern item (C's dflt).
		ep := ms.classEnd(p)
		m := s < len(ms.src) && ms.singleMatch(ms.src[s], p, ep)
		switch ms.p(ep) {
		case '?':
			if m {
				if res := ms.match(s+1, ep+1); res >= 0 {
					return res
				}
			}
			p = ep + 1
			continue
		case '*':
			return ms.maxExpand(s, p, ep)
		case '+':
			if !m {
				return -1
			}
			return ms.maxExpand(s+1, p, ep)
		case '-':
			return ms.minExpand(s, p, ep)
		}
		if !m {
			return -1
		}
		s, p = s+1, ep
	}
}

func (ms *luaMatchState) pushOneCapture(i, s, e int) {
	if i >= ms.level {
		if i != 0 {
			ms.L.RaiseError("invalid capture index")
		}
		ms.L.Push(lua.LString(ms.src[s:e])) // the whole match
		return
	}
	c := ms.capt[i]
	switch c.len {
	case capUnfinished:
		ms.L.RaiseError("unfinished capture")
	case capPosition:
		ms.L.Push(lua.LNumber(c.init + 1))
	default:
		ms.L.Push(lua.LString(ms.src[c.init : c.init+c.len]))
	}
}

// pushCaptures pushes the captures, or the whole match src[s:e] when the
// pattern has none (s < 0: none, for find).
func (ms *luaMatchState) pushCaptures(s, e int) int {
	n := ms.level
	if n == 0 && s >= 0 {
		n = 1
	}
	for i := range n {
		ms.pushOneCapture(i, s, e)
	}
	return n
}

// luaCheckString is luaL_checklstring: a number is written as Lua 5.1
// writes it.
func luaCheckString(L *lua.LState, i int) string {
	if n, ok := L.Get(i).(lua.LNumber); ok {
		return luaNumber14(float64(n))
	}
	return L.CheckString(i)
}

// luaStrFindAux is str_find_aux: string.find (find) and string.match.
func luaStrFindAux(L *lua.LState, find bool) int {
	s, pat := luaCheckString(L, 1), luaCheckString(L, 2)
	init := 1
	if v := L.Get(3); v != lua.LNil {
		init = int(L.CheckNumber(3))
	}
	if init < 0 { // posrelat
		init += len(s) + 1
	}
	init--
	init = max(init, 0)
	init = min(init, len(s))
	whole := pat
	if cut := strings.IndexByte(pat, 0); cut >= 0 {
		pat = pat[:cut] // C reads the pattern up to its first '\0', but for a plain find
	}
	if find && (lua.LVAsBool(L.Get(4)) || !strings.ContainsAny(pat, luaSpecials)) {
		pat = whole
		if i := strings.Index(s[init:], pat); i >= 0 {
			L.Push(lua.LNumber(init + i + 1))
			L.Push(lua.LNumber(init + i + len(pat)))
			return 2
		}
		L.Push(lua.LNil)
		return 1
	}
	ms := &luaMatchState{L: L, src: s, pat: pat}
	p, anchor := 0, strings.HasPrefix(pat, "^")
	if anchor {
		p = 1
	}
	for s1 := init; ; s1++ {
		ms.level = 0
		if e := ms.match(s1, p); e >= 0 {
			if find {
				L.Push(lua.LNumber(s1 + 1))
				L.Push(lua.LNumber(e))
				return ms.pushCaptures(-1, 0) + 2
			}
			return ms.pushCaptures(s1, e)
		}
		if s1 >= len(s) || anchor {
			break
		}
	}
	L.Push(lua.LNil)
	return 1
}
