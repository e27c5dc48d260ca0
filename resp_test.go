package redlock

import (
	"bufio"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// parseInt must agree with strconv.ParseInt on every input it accepts, and
// refuse what strconv refuses. It is stricter: no "+" sign and at most 19
// digits (Redis writes neither a sign nor leading zeros).
func TestParseIntMatchesStrconv(t *testing.T) {
	inputs := []string{"", "-", "0", "-0", "1", "-1", "007", "42", "+1", " 1", "1 ", "1a", "--1",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"99999999999999999999", "18446744073709551615", "18446744073709551616"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(22))
		for i := range b {
			b[i] = "-0123456789x"[r.IntN(12)]
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		got, ok := parseInt([]byte(in))
		want, err := strconv.ParseInt(in, 10, 64)
		if !ok && err == nil && (strings.HasPrefix(in, "+") || len(strings.TrimPrefix(in, "-")) > 19) {
			continue
		}
		if ok != (err == nil) || (ok && got != want) {
			t.Errorf("parseInt(%q) = %d, %v; strconv says %d, %v", in, got, ok, want, err)
		}
	}
}

// TestReadReplyBounds: whatever lengths a reply declares, a DirectNode
// allocates no more than the reply's bytes and one bulk string's bound: a
// length over the bounds, arrays nested too deep or a line with no end is a
// protocol error (ErrBadReply), found before anything of the declared size
// is allocated; so is a bulk string's payload not ended by CRLF.
func TestReadReplyBounds(t *testing.T) {
	for _, tc := range []struct{ reply, says string }{
		{"$99999999\r\n", "bulk string of 99999999 bytes"},
		{"*99999999\r\n", "array of 99999999 elements"},
		{"$9223372036854775807\r\n", "bulk string of 9223372036854775807 bytes"},
		{"*9223372036854775807\r\n", "array of 9223372036854775807 elements"},
		{"$99999999999999999999999\r\n", "bulk length"},
		{"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "nested over 4 deep"},
		{"*2\r\n:1\r\n$99999999\r\n", "bulk string of 99999999 bytes"},
		{strings.Repeat("+", 1<<20), "line over 4096 bytes"},
		{"$2\r\nOKxx", "not ended by CRLF"},
		{"$-2\r\n", "bulk length"},
	} {
		src := strings.NewReader(tc.reply)
		r := bufio.NewReaderSize(src, 4096)
		var err error
		const runs = 50
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			src.Reset(tc.reply)
			r.Reset(src)
			_, _, err = readReply(r)
		}
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errProtocol) || !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("reply %.40q: %v; want a protocol error saying %q", tc.reply, err, tc.says)
		}
		if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4<<10 {
			t.Errorf("reply %.40q: %d bytes allocated per read", tc.reply, per)
		}
	}
}
