package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/redlock/redlock"
	"github.com/redlock/redlock/internal/cliflag"
)

// masterState is what one master says about a key.
type masterState struct {
	url   string // redacted
	value string // "" when the key is absent; owner=ID,holds=N for an owned lock
	owner string // the owner of an owned lock (redlock.WithOwner)
	holds int    // its holds on this master
	pttl  time.Duration
	fence string // "" when the counter is absent
	// The read-write lock NAME (redlock.RWMutexKey): its live readers'
	// values, its live writer's ("" none), its live claims.
	readers []string
	writer  string
	claims  int
	sem     semState
	err     error
}

// semState is what one master says about the Semaphore named NAME
// (redlock.SemaphoreKey): its stored limit and its live permits.
type semState struct {
	limit string // "" when the master holds no permit
	slots []slotState
}

type slotState struct {
	slot   int
	holder string
	left   time.Duration // until the hold ends, by the master's clock
}

// readSem reads a semaphore's hash, fields as (redlock.SemaphoreKey)
// describes them, with the master's TIME: its live holds.
func readSem(fields map[string]string, now time.Time) semState {
	var st semState
	nowMs := now.UnixMilli()
	for f, v := range fields {
		if len(f) < 2 || f[0] != 'v' {
			continue
		}
		slot, err := strconv.Atoi(f[1:])
		end, err2 := strconv.ParseInt(fields["e"+f[1:]], 10, 64)
		if err != nil || err2 != nil || end <= nowMs {
			continue
		}
		st.slots = append(st.slots, slotState{slot, v, time.Duration(end-nowMs) * time.Millisecond})
	}
	if len(st.slots) > 0 {
		st.limit = fields["L"]
	}
	slices.SortFunc(st.slots, func(a, b slotState) int { return a.slot - b.slot })
	return st
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status")
	masters := fs.String("masters", "", "")
	timeout := cliflag.Duration(fs, "timeout", time.Second, "")
	asJSON := fs.Bool("json", false, "")
	if status, done := parseFlags(fs, args, statusUsage, stdout, stderr); done {
		return status
	}
	var urls []string
	err := func() error {
		switch {
		case *timeout <= 0:
			return usagef("--timeout must be positive, got %v", *timeout)
		case fs.NArg() != 1 || fs.Arg(0) == "":
			return usagef("want exactly one NAME, got %d arguments", fs.NArg())
		}
		var err error
		urls, err = masterURLs(*masters)
		return err
	}()
	if err != nil {
		return usageFail(stderr, "status", err)
	}
	opts := make([]redlock.MasterOptions, len(urls))
	for i, u := range urls {
		if opts[i], err = redlock.ParseMaster(u); err != nil {
			return usageFail(stderr, "status", err)
		}
	}

	name := fs.Arg(0)
	// Every master is read, each within the timeout; one that fails is a
	// row of the report, not an error that stops the others.
	states := make([]masterState, len(urls))
	var g errgroup.Group
	for i := range urls {
		g.Go(func() error {
			states[i] = readMaster(ctx, opts[i], name, *timeout)
			states[i].url = redlock.RedactURL(urls[i])
			return nil
		})
	}
	_ = g.Wait() // every read returns nil
	if *asJSON {
		return reportJSON(stdout, name, states)
	}
	return report(stdout, name, states)
}

// readMaster reads key (a plain lock's value, or an owned lock's owner and
// holds), its PTTL and its fence counter from one master.
func readMaster(ctx context.Context, o redlock.MasterOptions, key string, timeout time.Duration) masterState {
	c := o.NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var typ *redis.StatusCmd
	var fence *redis.StringCmd
	var pttl *redis.DurationCmd
	var now *redis.TimeCmd
	var rw *redis.MapStringStringCmd
	var sem *redis.MapStringStringCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, key)
		pttl = p.PTTL(ctx, key)
		fence = p.Get(ctx, redlock.FenceKey(key))
		now = p.Time(ctx)
		rw = p.HGetAll(ctx, redlock.RWMutexKey(key))
		sem = p.HGetAll(ctx, redlock.SemaphoreKey(key))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return masterState{err: err}
	}
	s := masterState{pttl: pttl.Val(), fence: fence.Val(), sem: readSem(sem.Val(), now.Val())}
	s.readRW(rw.Val(), now.Val().UnixMilli())
	switch typ.Val() {
	case "string": // a plain lock
		s.value, err = c.Get(ctx, key).Result()
	case "hash": // an owned lock: its owner, and a field per hold
		var m map[string]string
		if m, err = c.HGetAll(ctx, key).Result(); err == nil && len(m) > 0 {
			s.owner = m["owner"]
			for f := range m {
				if f != "owner" && f != "fence" {
					s.holds++
				}
			}
			s.value = fmt.Sprintf("owner=%s,holds=%d", s.owner, s.holds)
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) { // redis.Nil: it expired meanwhile
		return masterState{err: err}
	}
	return s
}

// readRW reads the read-write lock's hash on a master whose clock reads
// now (ms): each field is a holder or a claim, live through the ms it
// holds (the scripts' lua/rw_state.lua).
func (s *masterState) readRW(fields map[string]string, now int64) {
	for f, at := range fields {
		ms, err := strconv.ParseInt(at, 10, 64)
		if err != nil || ms < now || f == "" {
			continue
		}
		switch f[0] {
		case 'r':
			s.readers = append(s.readers, f[1:])
		case 'w':
			s.writer = f[1:]
		case 'c':
			s.claims++
		}
	}
	slices.Sort(s.readers)
}

// rwSummary is what a quorum of the masters says of the read-write lock.
type rwSummary struct {
	shown    bool   // some master has a holder or a claim
	readers  int    // readers live on a quorum
	writer   string // the writer most masters hold
	writerOn int    // on how many
	claims   int    // masters with a live claim
}

func summarizeRW(states []masterState) rwSummary {
	var sum rwSummary
	quorum := len(states)/2 + 1
	readers, writers := map[string]int{}, map[string]int{}
	for _, s := range states {
		if s.err != nil {
			continue
		}
		for _, v := range s.readers {
			readers[v]++
		}
		if s.writer != "" {
			writers[s.writer]++
		}
		if s.claims > 0 {
			sum.claims++
		}
		sum.shown = sum.shown || len(s.readers) > 0 || s.writer != "" || s.claims > 0
	}
	for _, k := range readers {
		if k >= quorum {
			sum.readers++
		}
	}
	sum.writer, sum.writerOn = holder(writers)
	return sum
}

// reportRW prints the read-write lock's table and verdict, when it has
// holders or claims anywhere.
func reportRW(w io.Writer, name string, states []masterState) {
	sum := summarizeRW(states)
	if !sum.shown {
		return
	}
	n, quorum := len(states), len(states)/2+1
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tREADERS\tWRITER\tCLAIMS")
	for _, s := range states {
		if s.err == nil {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", s.url, len(s.readers), orDash(s.writer), s.claims)
		}
	}
	tw.Flush()
	switch {
	case sum.writerOn >= quorum:
		fmt.Fprintf(w, "read-write lock %q is held by its writer %s on %d of %d masters (quorum %d)", name, sum.writer, sum.writerOn, n, quorum)
	case sum.readers > 0:
		fmt.Fprintf(w, "read-write lock %q is held by %s on a quorum (%d of %d masters)", name, plural(sum.readers, "reader"), quorum, n)
	default:
		fmt.Fprintf(w, "read-write lock %q is held by no quorum", name)
	}
	if sum.claims > 0 {
		fmt.Fprintf(w, "; a waiting writer's claim on %d of %d masters", sum.claims, n)
	}
	fmt.Fprintln(w)
}

// report prints the table and the verdict, and returns the exit status.
func report(w io.Writer, name string, states []masterState) int {
	n, quorum := len(states), len(states)/2+1
	answered := 0
	holders := map[string]int{}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tVALUE\tPTTL\tFENCE")
	for _, s := range states {
		if s.err != nil {
			fmt.Fprintf(tw, "%s\terror: %v\t\t\n", s.url, s.err)
			continue
		}
		answered++
		value, pttl := "-", "-"
		if s.value != "" {
			holders[s.value]++
			value = s.value
			pttl = s.pttl.String()
			if s.pttl < 0 {
				pttl = "no expiry"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.url, value, pttl, orDash(s.fence))
	}
	tw.Flush()

	best, most := holder(holders)
	owner, holds := "", 0
	for _, s := range states {
		if s.err == nil && s.value == best {
			owner, holds = s.owner, s.holds
		}
	}
	switch {
	case most >= quorum && owner != "":
		fmt.Fprintf(w, "%q is held by owner %s with %s on %d of %d masters (quorum %d)\n", name, owner, plural(holds, "hold"), most, n, quorum)
	case most >= quorum:
		fmt.Fprintf(w, "%q is held: value %s on %d of %d masters (quorum %d)\n", name, best, most, n, quorum)
	case most > 0:
		fmt.Fprintf(w, "%q is not held by a quorum: at most %d of %d masters (quorum %d) agree on a value\n", name, most, n, quorum)
	default:
		fmt.Fprintf(w, "%q is free on the %d of %d masters that answered\n", name, answered, n)
	}
	reportRW(w, name, states)
	reportSem(w, name, states, quorum)
	if answered < quorum {
		fmt.Fprintf(w, "only %d of %d masters answered (quorum %d): check that they are up and reachable\n", answered, n, quorum)
		return exitUnavailable
	}
	return exitOK
}

// reportSem prints the permits of the Semaphore named name, when some
// master holds one: a row per master and live slot, then the permits a
// quorum holds, each with its holder.
func reportSem(w io.Writer, name string, states []masterState, quorum int) {
	held := semHeld(states, quorum)
	some := false
	for _, s := range states {
		some = some || len(s.sem.slots) > 0
	}
	if !some {
		return
	}
	fmt.Fprintf(w, "\nsemaphore %q (%s):\n", name, redlock.SemaphoreKey(name))
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tLIMIT\tSLOT\tHOLDER\tLEFT")
	for _, s := range states {
		for _, sl := range s.sem.slots {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\n", s.url, s.sem.limit, sl.slot, sl.holder, sl.left)
		}
	}
	tw.Flush()
	limit := "?"
	for _, s := range states {
		if s.sem.limit != "" {
			limit = s.sem.limit
		}
	}
	fmt.Fprintf(w, "%d of %s permits held on a quorum (%d)", len(held), limit, quorum)
	for _, h := range held {
		fmt.Fprintf(w, "; slot %d by %s", h.slot, h.holder)
	}
	fmt.Fprintln(w)
}

// semHeld is the permits a quorum of masters holds: per slot, the holder
// most masters name, when at least quorum do.
func semHeld(states []masterState, quorum int) []slotState {
	count := map[slotState]int{}
	for _, s := range states {
		for _, sl := range s.sem.slots {
			count[slotState{slot: sl.slot, holder: sl.holder}]++
		}
	}
	var held []slotState
	for k, n := range count {
		if n >= quorum {
			held = append(held, k)
		}
	}
	slices.SortFunc(held, func(a, b slotState) int { return a.slot - b.slot })
	return held
}

// holder returns the value most masters hold, and on how many.
func holder(holders map[string]int) (best string, most int) {
	for v, k := range holders {
		if k > most || (k == most && v < best) {
			best, most = v, k
		}
	}
	return best, most
}

// statusJSON is status --json's report.
type statusJSON struct {
	Name     string       `json:"name"`
	Quorum   int          `json:"quorum"`
	Masters  []masterJSON `json:"masters"`
	Answered int          `json:"answered"`
	Holder   string       `json:"holder,omitempty"` // the value most masters hold
	Owner    string       `json:"owner,omitempty"`  // its owner, for an owned lock (redlock exec's)
	Holders  int          `json:"holders"`          // how many hold it
	Held     bool         `json:"held"`             // holders >= quorum
	RW       *rwJSON      `json:"rw,omitempty"`     // the read-write lock NAME, when it has holders or claims
	// Permits: the Semaphore of this name, when a master holds a permit.
	Permits *permitsJSON `json:"permits,omitempty"`
}

type rwJSON struct {
	Readers  int    `json:"readers"`             // readers live on a quorum
	Writer   string `json:"writer,omitempty"`    // the writer most masters hold
	WriterOn int    `json:"writer_on,omitempty"` // on how many
	Claims   int    `json:"claims"`              // masters with a waiting writer's claim
}

type permitsJSON struct {
	Limit string     `json:"limit"`
	Held  []slotJSON `json:"held"` // the permits a quorum holds
}

type slotJSON struct {
	Slot   int    `json:"slot"`
	Holder string `json:"holder"`
	LeftMs int64  `json:"left_ms,omitempty"` // per master only
}

type masterJSON struct {
	Master string `json:"master"` // redacted
	Value  string `json:"value,omitempty"`
	Owner  string `json:"owner,omitempty"`   // an owned lock's owner
	Holds  int    `json:"holds,omitempty"`   // and its holds on this master
	PTTLms *int64 `json:"pttl_ms,omitempty"` // -1: no expiry; absent when the key is
	Fence  string `json:"fence,omitempty"`
	// The read-write lock NAME on this master.
	RWReaders []string `json:"rw_readers,omitempty"`
	RWWriter  string   `json:"rw_writer,omitempty"`
	RWClaims  int      `json:"rw_claims,omitempty"`
	Error     string   `json:"error,omitempty"`
	// Permits: its live permits of the Semaphore of this name.
	PermitLimit string     `json:"permit_limit,omitempty"`
	Permits     []slotJSON `json:"permits,omitempty"`
}

// reportJSON prints the report as one JSON object, and returns the same
// exit status as report.
func reportJSON(w io.Writer, name string, states []masterState) int {
	out := statusJSON{Name: name, Quorum: len(states)/2 + 1, Masters: make([]masterJSON, len(states))}
	holders := map[string]int{}
	for i, s := range states {
		m := &out.Masters[i]
		m.Master = s.url
		if s.err != nil {
			m.Error = s.err.Error()
			continue
		}
		out.Answered++
		m.Fence = s.fence
		m.RWReaders, m.RWWriter, m.RWClaims = s.readers, s.writer, s.claims
		m.PermitLimit = s.sem.limit
		for _, sl := range s.sem.slots {
			m.Permits = append(m.Permits, slotJSON{sl.slot, sl.holder, sl.left.Milliseconds()})
		}
		if s.sem.limit != "" {
			if out.Permits == nil {
				out.Permits = &permitsJSON{Held: []slotJSON{}}
			}
			out.Permits.Limit = s.sem.limit
		}
		if s.value != "" {
			holders[s.value]++
			m.Value, m.Owner, m.Holds = s.value, s.owner, s.holds
			ms := s.pttl.Milliseconds()
			if s.pttl < 0 {
				ms = -1
			}
			m.PTTLms = &ms
		}
	}
	out.Holder, out.Holders = holder(holders)
	for _, s := range states {
		if s.err == nil && s.value == out.Holder {
			out.Owner = s.owner
		}
	}
	out.Held = out.Holders >= out.Quorum
	if sum := summarizeRW(states); sum.shown {
		out.RW = &rwJSON{Readers: sum.readers, Writer: sum.writer, WriterOn: sum.writerOn, Claims: sum.claims}
	}
	if out.Permits != nil {
		for _, h := range semHeld(states, out.Quorum) {
			out.Permits.Held = append(out.Permits.Held, slotJSON{Slot: h.slot, Holder: h.holder})
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
	if out.Answered < out.Quorum {
		return exitUnavailable
	}
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural is "1 hold", "2 holds".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
