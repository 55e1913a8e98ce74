package lab

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestServeUDPLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	conns, err := listenUDP(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveUDP(ctx, conns, []byte("b7\n")) }()

	c, err := net.DialUDP("udp", nil, conns[0].LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf) // a connected socket only accepts the server's address
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "b7\n" {
		t.Fatalf("reply %q, want %q", got, "b7\n")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveUDP after cancel: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("serveUDP did not stop after cancel")
	}
}

func TestListenUDPRejectsHostname(t *testing.T) {
	if _, err := listenUDP(t.Context(), "localhost:5353"); err == nil {
		t.Fatal("want error for a host name")
	}
}
