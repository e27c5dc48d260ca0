package chaos

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// postOn sends form to path over conn, as a writer's HTTP client would,
// and returns the request, to read its reply with http.ReadResponse.
func postOn(t *testing.T, conn net.Conn, p *procs, path string, form url.Values) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.url()+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	return req
}

// A killed writer's write that was on its way when it died lands inside
// its holding: the holding ends only after every connection the writer
// used is closed, so the checker never calls it late. CI once saw the
// harness end the holding first (process-holder-kill: UNSAFE, 1 late
// write) when the write's handler ran 50 ms late on a loaded machine.
func TestProcKilledWriterInFlightWriteNotLate(t *testing.T) {
	e := &env{rec: newRecorder(), ttl: time.Second, fencing: true}
	e.res = newResource(e.rec, true)
	p, err := newProcs(e, "redlock")
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	p.mu.Lock()
	p.launches[0] = launch{at: e.rec.now(), pgid: 1}
	p.mu.Unlock()

	conn, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	req := postOn(t, conn, p, "/begin", url.Values{"client": {"0"}, "key": {"k"}, "token": {"7"}, "pid": {"1"}, "pgid": {"1"}})
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 32)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	id, err := strconv.Atoi(strings.TrimSpace(string(body[:n])))
	if err != nil {
		t.Fatalf("begin replied %q: %v", body[:n], err)
	}

	// The write's handler is held back (as by a loaded machine) until
	// after the writer is gone.
	e.res.mu.Lock()
	postOn(t, conn, p, "/write", url.Values{"id": {strconv.Itoa(id)}})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		w := p.holders[id].writes
		p.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			e.res.mu.Unlock()
			t.Fatal("the write's handler did not start in 5 s")
		}
	}
	conn.Close() // SIGKILL: the kernel closes the writer's sockets
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		p.exited(id) // what run does once exec's Wait returns
	}()
	time.Sleep(30 * time.Millisecond)
	e.res.mu.Unlock()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the holding did not end 10 s after its writer's connection closed")
	}

	h := e.rec.history()
	for deadline := time.Now().Add(5 * time.Second); len(h.Writes) == 0 && time.Now().Before(deadline); h = e.rec.history() {
		time.Sleep(time.Millisecond)
	}
	if len(h.Writes) != 1 || !h.Writes[0].Accepted {
		t.Fatalf("writes %+v: want the one write, accepted", h.Writes)
	}
	if f := Check(h); f.LateAccepted != 0 {
		t.Errorf("the in-flight write at %v counted late: holding %+v", h.Writes[0].At, h.Acquires[0])
	}
}
