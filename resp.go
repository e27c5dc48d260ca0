package redlock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// This file is the RESP2 protocol as a [DirectNode] speaks it: the few
// commands the Redlock sends, encoded straight into the connection's write
// buffer, and a strict, bounded reader for the replies.

// respError is an error reply ("-ERR ...", "-NOSCRIPT ..."). Like go-redis's,
// it has a RedisError method, so redis.HasErrorPrefix recognises it.
type respError string

func (e respError) Error() string { return string(e) }
func (e respError) RedisError()   {}

// Limits on a reply: ours are small integers, OK or nil. A master that
// declares more is broken or hostile, and is not allowed to make the client
// allocate by a length it declares.
const (
	maxBulkLen  = 64 << 10 // a bulk string
	maxArrayLen = 64       // an array's elements
	maxDepth    = 4        // nested arrays
)

// errProtocol is a reply that is not RESP2. The connection cannot be used
// after it: where the next reply starts is unknown.
var errProtocol = errors.New("redlock: master broke the RESP protocol")

func appendArrayLen(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendBulkInt(b []byte, n int64) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], n, 10)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendCommand appends a command of string arguments (the handshake's).
func appendCommand(b []byte, args ...string) []byte {
	b = appendArrayLen(b, len(args))
	for _, a := range args {
		b = appendBulk(b, a)
	}
	return b
}

// appendRequest appends q as one command: SET for an acquire, else the
// request's script, by EVALSHA when sha is set, by EVAL with its source
// otherwise. It returns the script's bit (see [scriptBit]), 0 for SET.
func appendRequest(b []byte, q *request, sha bool) ([]byte, uint8) {
	if q.kind == reqAcquire {
		b = appendArrayLen(b, 6)
		b = appendBulk(b, "SET")
		b = appendBulk(b, q.key)
		b = appendBulk(b, q.value)
		b = appendBulk(b, "PX")
		b = appendBulkInt(b, q.ttl.Milliseconds())
		return appendBulk(b, "NX"), 0
	}
	s := scriptOf(q.kind)
	keys := 1
	if q.kind == reqAcquireFenced || q.kind == reqRaiseFence {
		keys = 2
	}
	b = appendArrayLen(b, 3+keys+2-boolInt(q.kind == reqRelease))
	if sha {
		b = appendBulk(b, "EVALSHA")
		b = appendBulk(b, s.Hash())
	} else {
		b = appendBulk(b, "EVAL")
		b = appendBulk(b, scriptSource[s])
	}
	b = appendBulkInt(b, int64(keys))
	b = appendBulk(b, q.key)
	if keys == 2 {
		b = appendBulk(b, FenceKey(q.key))
	}
	b = appendBulk(b, q.value)
	switch q.kind {
	case reqAcquireFenced, reqExtend:
		b = appendBulkInt(b, q.ttl.Milliseconds())
	case reqRaiseFence:
		b = appendBulkInt(b, int64(q.token))
	}
	return b, scriptBit(q.kind)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scriptOf is the script of a request kind other than reqAcquire, for the
// DirectNode's requests and the batchers' commands alike.
func scriptOf(k reqKind) *redis.Script {
	switch k {
	case reqAcquireFenced:
		return acquireFencedScript
	case reqRaiseFence:
		return raiseFenceScript
	case reqExtend:
		return extendScript
	}
	return releaseScript
}

// scriptBit is the bit of a request kind's script in a connection's set of
// scripts it has sent with EVAL (so the master has them cached).
func scriptBit(k reqKind) uint8 { return 1 << k }

// readReply reads one reply. An error reply comes back as a respError in
// rerr, a nil reply as redis.Nil in rerr (as go-redis reports them, so the
// strict readers of reply.go apply); err is a broken connection or
// errProtocol, after which nothing more can be read.
func readReply(r *bufio.Reader) (v any, rerr, err error) {
	return readValue(r, 0)
}

func readValue(r *bufio.Reader, depth int) (v any, rerr, err error) {
	line, err := readLine(r)
	if err != nil {
		return nil, nil, err
	}
	if len(line) == 0 {
		return nil, nil, protocolf("empty line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		if string(body) == "OK" {
			return "OK", nil, nil // SET's reply, without an allocation
		}
		return string(body), nil, nil
	case '-':
		return nil, respError(body), nil
	case ':':
		n, ok := parseInt(body)
		if !ok {
			return nil, nil, protocolf("integer %q", shorten(body))
		}
		return n, nil, nil
	case '$':
		n64, ok := parseInt(body)
		n := int(n64)
		switch {
		case !ok || n < -1:
			return nil, nil, protocolf("bulk length %q", shorten(body))
		case n == -1:
			return nil, redis.Nil, nil
		case n > maxBulkLen:
			return nil, nil, protocolf("bulk string of %d bytes, over the %d allowed", n, maxBulkLen)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, nil, err
		}
		if b[n] != '\r' || b[n+1] != '\n' {
			return nil, nil, protocolf("bulk string not ended by CRLF")
		}
		return string(b[:n]), nil, nil
	case '*':
		n64, ok := parseInt(body)
		n := int(n64)
		switch {
		case !ok || n < -1:
			return nil, nil, protocolf("array length %q", shorten(body))
		case n == -1:
			return nil, redis.Nil, nil
		case n > maxArrayLen:
			return nil, nil, protocolf("array of %d elements, over the %d allowed", n, maxArrayLen)
		case depth >= maxDepth:
			return nil, nil, protocolf("arrays nested over %d deep", maxDepth)
		}
		a := make([]any, n)
		for i := range a {
			e, rerr, err := readValue(r, depth+1)
			if err != nil {
				return nil, nil, err
			}
			if rerr != nil && rerr != redis.Nil {
				e = rerr
			}
			a[i] = e
		}
		return a, nil, nil
	}
	return nil, nil, protocolf("reply type %q", line[0])
}

// parseInt reads a decimal int64 (an optional minus sign, then 1 to 19
// digits) without the allocation of strconv on a []byte.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case !neg && n > 1<<63-1, neg && n > 1<<63:
		return 0, false
	case neg:
		return -int64(n), true
	}
	return int64(n), true
}

// readLine reads a line without its CRLF. A line longer than the reader's
// buffer is a protocol error, not an allocation.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, protocolf("line over %d bytes", r.Size())
	case err != nil:
		return nil, err
	case len(line) < 2 || line[len(line)-2] != '\r':
		return nil, protocolf("line not ended by CRLF")
	}
	return line[:len(line)-2], nil
}

func protocolf(format string, args ...any) error {
	return fmt.Errorf("%w: %w", errProtocol, badReplyf(format, args...))
}

func shorten(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "..."
	}
	return string(b)
}
