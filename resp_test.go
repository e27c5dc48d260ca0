package redlock

import (
	"math/rand/v2"
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
