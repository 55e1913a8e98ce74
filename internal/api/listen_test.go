package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
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
