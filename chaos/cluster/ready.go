package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// waitReady polls addr with PING until it answers +PONG or ctx ends. A
// master still loading its append-only file answers -LOADING: not ready.
func waitReady(ctx context.Context, addr string) error {
	for {
		err := ping(ctx, addr)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer PING: %w (last: %v)", addr, context.Cause(ctx), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ping sends one PING on a fresh connection, each step bounded by 250ms.
func ping(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 250 * time.Millisecond}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(250 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
