package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestZZProbe(t *testing.T) {
	ctx := context.Background()
	cs := newClients(t, addrs(1))
	rl := newRedlock(t, cs).r
	for _, kind := range []string{"mutex", "reader", "writer"} {
		op := rwOp(rl, kind, newKey(t))
		op(ctx)
		conn, _ := net.Dial("tcp", addrs(1)[0])
		conn.Write([]byte("MONITOR\r\n"))
		rd := bufio.NewReader(conn)
		rd.ReadString('\n')
		op(ctx)
		time.Sleep(50 * time.Millisecond)
		conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				break
			}
			if len(l) > 160 {
				l = l[:160]
			}
			fmt.Println(kind, strings.TrimSpace(l))
		}
		conn.Close()
		cs[0].ConfigResetStat(ctx)
		for range 3000 {
			op(ctx)
		}
		s := cs[0].Info(ctx, "commandstats").Val()
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, "calls") {
				fmt.Println(kind, strings.TrimSpace(l))
			}
		}
	}
}
