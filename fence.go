package redlock

import "sync"

// Fence is the resource's side of fencing tokens: it remembers the highest
// token it has seen and rejects writes that carry a lower one, so a holder
// that was paused past its validity, while another client took the lock and
// wrote, cannot overwrite the newer holder's work.
//
// Use one Fence per protected resource (per lock key), next to the resource
// itself: in the process that owns the data, not in the clients. A token
// equal to the highest is accepted, so one holder may write many times.
//
// The zero value is ready to use. A Fence is safe for concurrent use and must
// not be copied after first use.
type Fence struct {
	mu      sync.Mutex // guards highest, and serialises the writes of Guard
	highest uint64
}

// Check accepts a write that carries token: it returns nil and remembers
// token when token is at least the highest seen so far, and a
// [*StaleTokenError] (matching [ErrStaleToken]) otherwise. Token 0, which
// means the lock was taken without [WithFencing], is always rejected with a
// [*ConfigError].
//
// Check alone suits a resource whose writes are ordered by other means (the
// chaos harness's history, a single-threaded store). When writes can run
// concurrently, use [Fence.Guard], which holds the fence across the write.
func (f *Fence) Check(token uint64) error {
	if err := f.valid(token); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.check(token)
}

// Guard runs write if token passes [Fence.Check], holding the fence while
// write runs, so no write with a higher token can finish between the check
// and the write. It returns Check's error (write not run) or write's error.
// The token counts as seen even when write fails: a holder with it exists.
func (f *Fence) Guard(token uint64, write func() error) error {
	if err := f.valid(token); err != nil {
		return err
	}
	if write == nil {
		return configErr("write", "Guard needs a write function, got nil")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(token); err != nil {
		return err
	}
	return write()
}

// Highest returns the highest token accepted so far, 0 before the first.
func (f *Fence) Highest() uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest
}

// valid rejects a nil Fence and the zero token.
func (f *Fence) valid(token uint64) error {
	if f == nil {
		return configErr("Fence", "method called on a nil *Fence; declare a Fence value (the zero value is ready)")
	}
	if token == 0 {
		return configErr("token", "token 0 is not a fencing token: take the lock with WithFencing() and pass lock.Fence()")
	}
	return nil
}

// check is Check with f.mu held.
func (f *Fence) check(token uint64) error {
	if token < f.highest {
		return &StaleTokenError{Token: token, Highest: f.highest}
	}
	f.highest = token
	return nil
}
