package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuMeter measures the CPU time spent by this process (the client) and by
// the local redis-server masters at addrs, so that a throughput benchmark
// can say where its time went: on a machine whose cores the masters share
// with the client, locks per second are bounded by the CPU both spend per
// lock.
type cpuMeter struct {
	pids        []int
	client, srv time.Duration
}

// newCPUMeter finds the masters' process ids (INFO server) and starts the
// count.
func newCPUMeter(b *testing.B, addrs []string) *cpuMeter {
	m := &cpuMeter{}
	for _, c := range newClients(b, addrs) {
		info, err := c.Info(context.Background(), "server").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "process_id:"); ok {
				pid, err := strconv.Atoi(v)
				if err != nil {
					b.Fatalf("INFO process_id %q: %v", v, err)
				}
				m.pids = append(m.pids, pid)
			}
		}
	}
	if len(m.pids) != len(addrs) {
		b.Fatalf("found %d master process ids, want %d", len(m.pids), len(addrs))
	}
	m.client, m.srv = m.read(b)
	return m
}

func (m *cpuMeter) read(b *testing.B) (client, srv time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, pid := range m.pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		// utime and stime are fields 14 and 15, after the command name in
		// parentheses, in clock ticks (USER_HZ, 100 on Linux).
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		for _, x := range f[11:13] {
			ticks, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				b.Fatalf("/proc/%d/stat: %v", pid, err)
			}
			srv += time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return client, srv
}

// report adds the CPU per op since newCPUMeter to b's metrics.
func (m *cpuMeter) report(b *testing.B) {
	client, srv := m.read(b)
	b.ReportMetric(float64((client-m.client).Microseconds())/float64(b.N), "client-cpu-µs/op")
	b.ReportMetric(float64((srv-m.srv).Microseconds())/float64(b.N), "masters-cpu-µs/op")
}
