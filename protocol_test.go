package redlock

// replyFor makes c's reply what a master answers when q's reply is what q
// holds (OK, Fence, Woke, Err): the inverse of decode, for test Nodes that
// answer for a master or change what it answered.
func replyFor(q *request, c *Command) {
	c.Reply, c.Err = nil, q.Err
	if q.Err != nil {
		return
	}
	switch {
	case q.Op == reqAcquireFenced:
		if q.OK {
			c.Reply = int64(q.Fence)
		} else {
			c.Reply = int64(0)
		}
	case q.Op == reqRelease:
		n := int64(0)
		if q.OK {
			n |= 1
		}
		if q.Woke {
			n |= 2
		}
		c.Reply = n
	case q.Op == reqAcquire && q.Owner == "" && !gated(q):
		if q.OK {
			c.Reply = "OK"
		}
	default:
		c.Reply = bit(q.OK)
	}
}
