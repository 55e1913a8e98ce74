package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

func TestUnixSocket(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(t.TempDir(), "run", "sluice.sock")
	l, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.handler}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	})

	for file, want := range map[string]os.FileMode{path: os.ModeSocket | 0o600, filepath.Dir(path): os.ModeDir | 0o755} {
		info, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode() != want {
			t.Errorf("%s has mode %v, want %v", file, info.Mode(), want)
		}
	}

	c := NewUnixClient(path)
	c.http.Transport = contractChecker(t, c.http.Transport)
	services, err := c.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 2 {
		t.Fatalf("Services over the socket = %+v", services)
	}

	if _, err := ListenUnix(path); err == nil {
		t.Fatal("ListenUnix took over the socket of a live server")
	}
}

func TestListenUnixReplacesOnlyStaleSockets(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close() // a daemon that died: the socket stays, nothing answers
	l, err := ListenUnix(stale)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	l.Close()

	notSocket := filepath.Join(dir, "file")
	if err := os.WriteFile(notSocket, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(notSocket); err == nil {
		t.Fatal("ListenUnix replaced a regular file")
	}
	if data, err := os.ReadFile(notSocket); err != nil || string(data) != "keep me" {
		t.Fatalf("the regular file was touched: %q, %v", data, err)
	}
}

func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logged testutil.LogBuffer
	l := LimitListener(inner, 2, slog.New(slog.NewTextHandler(&logged, nil)))
	accepted := make(chan net.Conn)
	acceptDone := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				acceptDone <- err
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String()) // the kernel completes the handshake: it is in the backlog
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	first, second := <-accepted, <-accepted
	select {
	case c := <-accepted:
		t.Fatalf("a third connection was accepted (%s) while two were open", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond): // not a timing: only a chance for a wrong Accept to show
	}
	for !strings.Contains(logged.String(), "connection limit") {
		time.Sleep(time.Millisecond) // Accept warns before it waits
	}
	if !strings.Contains(logged.String(), "limit=2") {
		t.Errorf("the warning does not name the limit: %s", logged.String())
	}
	first.Close()
	first.Close() // a second Close gives nothing back twice
	third := <-accepted
	second.Close()
	third.Close()

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-acceptDone; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

func TestLimitListenerCloseEndsAWaitingAccept(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(inner, 1, slog.New(slog.DiscardHandler))
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept() // waits at the limit
		done <- err
	}()
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept at the limit after Close: %v, want net.ErrClosed", err)
	}
}
