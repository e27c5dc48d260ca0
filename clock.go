package redlock

import "time"

// clock is the seam between the validity arithmetic and time. Production code
// uses the system clock: time.Now carries Go's monotonic reading, so elapsed
// times and deadlines are immune to wall-clock jumps (NTP steps, an operator's
// date). Tests substitute a clock that advances on demand.
//
// Never do validity arithmetic on wall-clock values and never serialise a
// deadline and read it back: both drop the monotonic reading.
type clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// deadline is the moment a lock acquired (or extended) at start stops being
// valid; left is its validity at now, ttl − elapsed − drift (it may be
// negative), and ok reports whether left is above minValidity.
func (c *config) deadline(start, now time.Time) (until time.Time, left time.Duration, ok bool) {
	left = c.ttl - now.Sub(start) - c.drift()
	return start.Add(c.ttl - c.drift()), left, left > c.minValidity
}
