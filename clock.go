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

// validity is what is left of a lock whose keys were set with ttl, elapsed
// after the attempt started: ttl − elapsed − drift. It may be negative.
func validity(ttl, elapsed, drift time.Duration) time.Duration {
	return ttl - elapsed - drift
}

// deadline is the moment a lock acquired (or extended) at start stops being
// valid, or the zero Time with ok false when the validity left at now is under
// minValidity.
func (c *config) deadline(start, now time.Time) (until time.Time, left time.Duration, ok bool) {
	v := validity(c.ttl, now.Sub(start), c.drift())
	return start.Add(c.ttl - c.drift()), v, v > c.minValidity
}
