package redlock

import (
	"errors"
	"sync"
	"testing"
)

func TestFenceCheck(t *testing.T) {
	var f Fence
	for _, tok := range []uint64{5, 5, 7, 100} {
		if err := f.Check(tok); err != nil {
			t.Fatalf("Check(%d) after highest %d: %v", tok, f.Highest(), err)
		}
	}
	err := f.Check(99)
	var se *StaleTokenError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &se) || se.Token != 99 || se.Highest != 100 {
		t.Fatalf("Check(99) after 100: %v, want a StaleTokenError{99, 100}", err)
	}
	if f.Highest() != 100 {
		t.Errorf("a rejected token moved Highest to %d", f.Highest())
	}

	var ce *ConfigError
	if err := f.Check(0); !errors.As(err, &ce) || ce.Field != "token" {
		t.Errorf("Check(0): %v, want a ConfigError on the token", err)
	}
	var nilFence *Fence
	if err := nilFence.Check(1); !errors.As(err, &ce) || nilFence.Highest() != 0 {
		t.Errorf("nil Fence: %v, want a ConfigError", err)
	}
	if err := f.Guard(200, nil); !errors.As(err, &ce) || f.Highest() != 100 {
		t.Errorf("Guard with a nil write: %v, want a ConfigError and no change", err)
	}
}

// TestFenceGuardSerialisesWrites: concurrent writers through Guard with
// random tokens; the writes that ran carry non-decreasing tokens in the order
// they ran, and every rejection names a higher token already written.
func TestFenceGuardSerialisesWrites(t *testing.T) {
	var f Fence
	var written []uint64 // appended by the writes only, which Guard serialises
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				tok := uint64((i*7919+g*104729)%1000 + 1)
				err := f.Guard(tok, func() error {
					written = append(written, tok)
					return nil
				})
				var se *StaleTokenError
				if err != nil && (!errors.As(err, &se) || se.Highest <= tok) {
					t.Errorf("Guard(%d): %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(written); i++ {
		if written[i] < written[i-1] {
			t.Fatalf("write %d carried token %d after %d", i, written[i], written[i-1])
		}
	}
	if len(written) == 0 || written[len(written)-1] != f.Highest() {
		t.Fatalf("last write %v, Highest %d", written[len(written)-1:], f.Highest())
	}
	wantErr := errors.New("disk full")
	if err := f.Guard(f.Highest()+1, func() error { return wantErr }); err != wantErr {
		t.Errorf("Guard returned %v, want the write's error", err)
	}
}
