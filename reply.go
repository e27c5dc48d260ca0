package redlock

import (
	"fmt"
)

// maxFence is the largest fence token the scripts can handle: Lua numbers
// are doubles, exact only up to 2^53, so a counter above it can no longer be
// incremented (n+1 == n) and tokens would stop increasing. A master's clock in
// µs stays under it until the year 2255.
const maxFence = 1 << 53

// badReply is a reply a real master would not give to the command that was
// sent: a wrong type, a value out of range. It matches [ErrBadReply].
type badReply struct{ msg string }

func (e *badReply) Error() string        { return "unexpected reply: " + e.msg }
func (e *badReply) Is(target error) bool { return target == ErrBadReply }

func badReplyf(format string, args ...any) error {
	return &badReply{msg: fmt.Sprintf(format, args...)}
}

// setOK reads the reply of SET ... NX: OK when the key was set, a nil when
// it exists. Anything else (an integer, another status) is an error, never a
// success: a broken or hostile master must not count towards a quorum.
func setOK(v any, err error) (bool, error) {
	switch {
	case err != nil:
		return false, err
	case v == nil:
		return false, nil
	case v != "OK":
		return false, badReplyf("SET answered %s, want OK or nil", show(v))
	}
	return true, nil
}

// scriptInt reads the integer reply of one of our scripts. They return
// integers only, so a string, a nil or an array is an error, not a value to
// convert.
func scriptInt(v any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	if v == nil {
		return 0, badReplyf("script answered nil, want an integer")
	}
	n, ok := v.(int64)
	if !ok {
		return 0, badReplyf("script answered %s, want an integer", show(v))
	}
	return n, nil
}

// flag reads a 0/1 script reply.
func flag(v any, err error) (bool, error) {
	n, err := scriptInt(v, err)
	if err != nil {
		return false, err
	}
	if n != 0 && n != 1 {
		return false, badReplyf("script answered %d, want 0 or 1", n)
	}
	return n == 1, nil
}

// fence reads the reply of the fenced acquire: 0 when the key was taken, else
// the raised counter, which must be a usable token.
func fence(key string, v any, err error) (uint64, error) {
	n, err := scriptInt(v, err)
	switch {
	case err != nil:
		return 0, err
	case n < 0:
		return 0, badReplyf("fence token %d is negative: %s was changed by hand", n, FenceKey(key))
	case n > maxFence:
		return 0, badReplyf("fence token %d is above 2^53, where the scripts cannot increase it", n)
	}
	return uint64(n), nil
}

// show describes a reply value for an error message, cut short: a hostile
// master must not be able to make our errors huge.
func show(v any) string {
	const limit = 64
	s := fmt.Sprintf("%T %q", v, v)
	if len(s) > limit {
		s = s[:limit] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// released reads the release scripts' reply: bit 1 when the key (or the
// hold) was ours and is gone, bit 2 when the release told a waiting call.
func released(v any, err error) (ok, woke bool, _ error) {
	n, err := scriptInt(v, err)
	if err != nil {
		return false, false, err
	}
	if n < 0 || n > 3 {
		return false, false, badReplyf("release script answered %d, want 0 to 3", n)
	}
	return n&1 != 0, n&2 != 0, nil
}
