package bgp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A listen port another socket holds is refused before the running server stops: the session
// stays established, the router sees nothing, and the error names the port and its holder.
func TestTakenListenPortKeepsTheSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := startRouter(t, loopback4, 65000, "")
	s := newSpeaker(t, nil)
	must(t, s.Configure(ctx, config(r.peer())))
	waitEstablished(t, s, r)
	before := peerStatus(t, s, r.addr)

	held, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { held.Close() })
	port := int32(held.Addr().(*net.TCPAddr).Port)

	c := config(r.peer())
	c.ListenPort = port
	err = s.Configure(ctx, c)
	var taken *PortTakenError
	if !errors.As(err, &taken) || taken.Port != port {
		t.Fatalf("configure on a taken port: %v, want a PortTakenError for %d", err, port)
	}
	self := fmt.Sprintf("(pid %d)", os.Getpid())
	if msg := err.Error(); !strings.Contains(msg, "listen_port: port "+strconv.Itoa(int(port))) || !strings.Contains(msg, self) {
		t.Errorf("error %q does not name the port and its holder %s", msg, self)
	}
	now := peerStatus(t, s, r.addr)
	if now.State != StateEstablished || !now.Since.Equal(before.Since) || now.Flaps != 0 || !r.established() {
		t.Errorf("the refused change touched the session: %+v -> %+v", before, now)
	}
	if downs := countState(r.seen(), failed); downs != 0 {
		t.Errorf("the router saw the session go down %d times", downs)
	}
	if st, _ := s.Status(ctx); st.ListenPort != -1 {
		t.Errorf("status listen port %d, want the running -1", st.ListenPort)
	}

	// Once the port is free, the change is taken.
	held.Close()
	must(t, s.Configure(ctx, c))
	if st, _ := s.Status(ctx); st.ListenPort != port {
		t.Errorf("status listen port %d, want %d", st.ListenPort, port)
	}
}

// A first configuration on a taken port is refused too, and CheckListen(-1) never is.
func TestCheckListen(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "[::]:0")
	must(t, err)
	defer held.Close()
	port := int32(held.Addr().(*net.TCPAddr).Port)
	var taken *PortTakenError
	if err := CheckListen(port); !errors.As(err, &taken) {
		t.Errorf("CheckListen of a held port: %v", err)
	}
	c := config()
	c.ListenPort = port
	if err := newSpeaker(t, nil).Configure(context.Background(), c); !errors.As(err, &taken) {
		t.Errorf("first Configure on a held port: %v", err)
	}
	if err := CheckListen(-1); err != nil {
		t.Errorf("CheckListen(-1): %v", err)
	}
}
