package chaos

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteTimeline draws the scenario's history as an SVG picture: one row per
// master with its faults as shaded bands, one per client with its holdings
// (from the acquire's return to the end of the holding, a tick at Until),
// its writes (accepted, rejected by fencing, or accepted though late or
// stale), and the overlaps in red across every row. When the checker found
// an overlap, a second panel zooms in on the first one.
func (s ScenarioReport) WriteTimeline(w io.Writer) error {
	h := s.History
	end := s.Took
	for _, a := range h.Acquires {
		end = max(end, a.Start, a.Acquired, min(a.end(), a.Start+time.Hour))
	}
	for _, f := range h.Faults {
		end = max(end, f.End)
	}
	t := newTimeline(s, h)
	panels := []span{{0, end, "whole run"}}
	if len(s.Overlaps) > 0 {
		o := s.Overlaps[0]
		pad := max((o.To-o.From)*4, 50*time.Millisecond)
		panels = append(panels, span{max(o.From-pad, 0), o.To + pad, "first overlap: " + o.String()})
	}
	height := 40
	for range panels {
		height += t.panelHeight() + 30
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="8" y="16" font-size="13" font-weight="bold">%s: %s (%s)</text>`+"\n", esc(s.Name), esc(s.Verdict()), esc(s.Outcome))
	fmt.Fprintf(&b, `<text x="8" y="31" fill="#555">%s</text>`+"\n", legend)
	y := 40
	for _, p := range panels {
		t.panel(&b, p, y)
		y += t.panelHeight() + 30
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

const (
	svgWidth = 1200
	labelW   = 110 // left margin for row names
	rowH     = 16
	legend   = "blue: holding (tick: Until, when it ran that long); green dot: write accepted; black ring: rejected by fencing; red dot: accepted late or stale; grey: fault; red band: overlap"
)

type span struct {
	from, to time.Duration
	title    string
}

// timeline is a history laid out in rows.
type timeline struct {
	s       ScenarioReport
	h       History
	masters int
	clients []int // client numbers, one row each
	row     map[int]int
	bad     map[int]bool // Write.Seq of unsafe accepted writes
}

func newTimeline(s ScenarioReport, h History) *timeline {
	t := &timeline{s: s, h: h, row: make(map[int]int), bad: make(map[int]bool)}
	for _, f := range h.Faults {
		for _, n := range f.Nodes {
			t.masters = max(t.masters, n+1)
		}
	}
	for _, a := range h.Acquires {
		if _, ok := t.row[a.Client]; !ok {
			t.row[a.Client] = 0
			t.clients = append(t.clients, a.Client)
		}
	}
	slices.Sort(t.clients)
	for i, c := range t.clients {
		t.row[c] = i
	}
	byID := make(map[int]Acquire, len(h.Acquires))
	for _, a := range h.Acquires {
		byID[a.ID] = a
	}
	newest := make(map[string]time.Duration)
	ws := slices.Clone(h.Writes)
	slices.SortFunc(ws, func(a, b Write) int { return int(a.Seq - b.Seq) })
	for _, w := range ws {
		a, ok := byID[w.Holder]
		if !ok {
			continue
		}
		n, seen := newest[w.Key]
		if w.Accepted && (w.At > a.valid() || (seen && n > a.Acquired)) {
			t.bad[int(w.Seq)] = true
		}
		if !seen || a.Acquired > n {
			newest[w.Key] = a.Acquired
		}
	}
	return t
}

// rows: one for client-side faults, one per master, one per client.
func (t *timeline) rows() int           { return 1 + t.masters + len(t.clients) }
func (t *timeline) panelHeight() int    { return 20 + t.rows()*rowH + 14 }
func (t *timeline) clientRow(c int) int { return 1 + t.masters + t.row[c] }

func (t *timeline) panel(b *strings.Builder, p span, top int) {
	plotW := float64(svgWidth - labelW - 10)
	x := func(d time.Duration) float64 {
		d = min(max(d, p.from), p.to)
		return float64(labelW) + plotW*float64(d-p.from)/float64(max(p.to-p.from, 1))
	}
	in := func(from, to time.Duration) bool { return to >= p.from && from <= p.to }
	rowY := func(r int) int { return top + 20 + r*rowH }
	fmt.Fprintf(b, `<text x="8" y="%d" font-weight="bold">%s (%v to %v)</text>`+"\n", top+12, esc(p.title), p.from.Round(time.Millisecond), p.to.Round(time.Millisecond))
	for r := range t.rows() {
		fill := "#fafafa"
		if r%2 == 1 {
			fill = "#f0f0f0"
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="%s"/>`+"\n", labelW, rowY(r), plotW, rowH, fill)
	}
	label := func(r int, s string) {
		fmt.Fprintf(b, `<text x="8" y="%d">%s</text>`+"\n", rowY(r)+12, esc(s))
	}
	label(0, "client faults")
	for m := range t.masters {
		label(1+m, fmt.Sprintf("master %d", m))
	}
	for _, c := range t.clients {
		label(t.clientRow(c), fmt.Sprintf("client %d", c))
	}
	// Faults: a band on each master's row (or the client-fault row), faint
	// across the clients' rows.
	for _, f := range t.h.Faults {
		if !in(f.At, f.End) {
			continue
		}
		x0, x1 := x(f.At), max(x(f.End), x(f.At)+1.5)
		tip := fmt.Sprintf("%s %v at %v for %v %s", f.Kind, f.Nodes, f.At.Round(time.Millisecond), (f.End - f.At).Round(time.Millisecond), f.Note)
		rows := []int{0}
		if len(f.Nodes) > 0 {
			rows = rows[:0]
			for _, n := range f.Nodes {
				rows = append(rows, 1+n)
			}
		}
		for _, r := range rows {
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#888"><title>%s</title></rect>`+"\n", x0, rowY(r)+2, x1-x0, rowH-4, esc(tip))
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#888" fill-opacity="0.12"/>`+"\n", x0, rowY(1+t.masters), x1-x0, len(t.clients)*rowH)
		if x1-x0 > 40 {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="white">%s</text>`+"\n", x0+3, rowY(rows[0])+11, esc(f.Kind))
		}
	}
	// Holdings and attempts.
	for _, a := range t.h.Acquires {
		r := rowY(t.clientRow(a.Client))
		if !a.OK {
			continue
		}
		e := a.end()
		if !in(a.Start, max(e, a.Until)) {
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#bbb"/>`+"\n", x(a.Start), x(a.Acquired), r+rowH/2, r+rowH/2)
		tip := fmt.Sprintf("#%d %s token %d: acquired %v, until %v, released %v", a.ID, a.Key, a.Token, a.Acquired.Round(time.Microsecond), a.Until.Round(time.Microsecond), a.Released.Round(time.Microsecond))
		if a.Lost >= 0 {
			tip += fmt.Sprintf(", lost %v", a.Lost.Round(time.Microsecond))
		}
		if a.Extend != "" {
			tip += fmt.Sprintf(", %s-extended %d times", a.Extend, a.Renewals)
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#4a7bd0" fill-opacity="0.75"><title>%s</title></rect>`+"\n",
			x(a.Acquired), r+3, max(x(e)-x(a.Acquired), 0.8), rowH-6, esc(tip))
		// Until, where the holding ran into it (not let go before).
		if a.Until < time.Hour && e == a.valid() && a.Until != a.Released && in(a.Until, a.Until) {
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#1d3f80" stroke-width="1.5"/>`+"\n", x(a.Until), x(a.Until), r+1, r+rowH-1)
		}
	}
	// Writes.
	byID := make(map[int]Acquire, len(t.h.Acquires))
	for _, a := range t.h.Acquires {
		byID[a.ID] = a
	}
	for _, w := range t.h.Writes {
		a, ok := byID[w.Holder]
		if !ok || !in(w.At, w.At) {
			continue
		}
		r := rowY(t.clientRow(a.Client)) + rowH/2
		tip := fmt.Sprintf("write #%d by #%d token %d at %v", w.Seq, w.Holder, w.Token, w.At.Round(time.Microsecond))
		switch {
		case !w.Accepted:
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%d" r="3.5" fill="none" stroke="black"><title>%s rejected</title></circle>`+"\n", x(w.At), r, esc(tip))
		case t.bad[int(w.Seq)]:
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%d" r="4" fill="#d00"><title>%s accepted: late or stale</title></circle>`+"\n", x(w.At), r, esc(tip))
		default:
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%d" r="2" fill="#2a2"><title>%s accepted</title></circle>`+"\n", x(w.At), r, esc(tip))
		}
	}
	// Overlaps.
	for _, o := range t.s.Overlaps {
		if !in(o.From, o.To) {
			continue
		}
		x0, x1 := x(o.From), max(x(o.To), x(o.From)+1.5)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e00" fill-opacity="0.35"><title>%s</title></rect>`+"\n",
			x0, rowY(0), x1-x0, t.rows()*rowH, esc(o.String()))
	}
	// Time axis.
	ay := rowY(t.rows()) + 11
	for i := range 6 {
		d := p.from + (p.to-p.from)*time.Duration(i)/5
		anchor := "middle"
		if i == 5 {
			anchor = "end"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#555" text-anchor="%s">%v</text>`+"\n", x(d), ay, anchor, roundAxis(d))
	}
}

func roundAxis(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}

func esc(s string) string { return html.EscapeString(s) }
