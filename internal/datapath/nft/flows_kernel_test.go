package nft

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

// dialFrom connects from a fixed local port of ns, as a client reusing its source ports does.
func dialFrom(t *testing.T, ns netns.NsHandle, network string, port int, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: echoTimeout, Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
		return err
	}}
	switch network {
	case "tcp4":
		d.LocalAddr = &net.TCPAddr{Port: port}
	default:
		d.LocalAddr = &net.UDPAddr{Port: port}
	}
	var c net.Conn
	var err error
	in(t, ns, func() { c, err = d.Dial(network, addr) })
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// TestKernelStaleFlowsFollowAReusedPort: a connection refused by a backend leaves a CLOSE
// conntrack entry that a new connection from the same source port follows to that backend even
// after the plan sends new flows elsewhere. DropStaleFlows deletes it (and the other entries that
// are not established: a closed connection, an unanswered datagram flow) and keeps the
// established ones, which ResetFlows then deletes.
func TestKernelStaleFlowsFollowAReusedPort(t *testing.T) {
	for _, mode := range []string{"nat", "fullnat"} {
		t.Run(mode, func(t *testing.T) {
			inFreshNetns(t, func() {
				client, backends := natTopology(t)
				died := make(chan struct{}) // 10.91.2.11:81 resets its one connection and stops listening
				in(t, backends, func() {
					serveTCPEcho(t) // :80 on both backends
					serveUDPEcho(t) // :53 on both backends
					dies := listenTCP(t, "10.91.2.11:81")
					go func() {
						defer close(died)
						if c, err := dies.Accept(); err == nil {
							_ = c.(*net.TCPConn).SetLinger(0)
							c.Close()
						}
						dies.Close()
					}()
					lives := listenTCP(t, "10.91.2.12:81")
					go func() {
						for {
							c, err := lives.Accept()
							if err != nil {
								return
							}
							c.Close()
						}
					}()
				})
				d := newTestDatapath(t)
				dns, web := service("dns", "udp", "10.91.9.100", 53, 54), service("web", "tcp", "10.91.9.100", 80, 81)
				apply(t, d, twoBackendPlan(mode, 0, dns, web))

				held := echoFrom(t, client, "tcp4", "10.91.9.100:80") // established
				echoFrom(t, client, "tcp4", "10.91.9.100:80").Close() // closing
				// A connection that 10.91.2.11 resets leaves a CLOSE entry with a reply seen, which conntrack
				// does not delete at once (it does for a refused connection's).
				const reused = 40123
				c, err := dialFrom(t, client, "tcp4", reused, "10.91.9.100:81")
				if err == nil {
					_ = c.SetDeadline(time.Now().Add(echoTimeout))
					_, err = c.Read(make([]byte, 1))
				}
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("the connection 10.91.2.11:81 resets: %v, want a reset", err)
				}
				<-died
				echoFrom(t, client, "udp4", "10.91.9.100:53") // answered
				if c, err := dialFrom(t, client, "udp4", 0, "10.91.9.100:54"); err != nil {
					t.Fatal(err)
				} else if _, err := c.Write([]byte("q")); err != nil { // unanswered
					t.Fatal(err)
				}

				after := twoBackendPlan(mode, 1, dns, web) // 10.91.2.11 falls: new flows go to 10.91.2.12
				apply(t, d, after)
				dnsAfter, webAfter := &after.Services[0], &after.Services[1]
				if _, err := dialFrom(t, client, "tcp4", reused, "10.91.9.100:81"); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("a reused port before DropStaleFlows: %v, want refused by 10.91.2.11 (the CLOSE entry kept its translation)", err)
				}

				dropStale(t, d, webAfter, 2) // the refused connection and the closed one
				dropStale(t, d, dnsAfter, 1) // the unanswered flow
				dropStale(t, d, webAfter, 0)
				if _, err := dialFrom(t, client, "tcp4", reused, "10.91.9.100:81"); err != nil {
					t.Fatalf("a reused port after DropStaleFlows: %v, want 10.91.2.12's answer", err)
				}
				_ = held.SetDeadline(time.Now().Add(echoTimeout))
				if _, err := held.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
				if _, err := held.Read(make([]byte, 4)); err != nil {
					t.Fatalf("the established connection after DropStaleFlows: %v", err)
				}
				resetFlows(t, d, webAfter, backend11, 1) // the held connection
				resetFlows(t, d, dnsAfter, backend11, 1) // the answered flow
			})
		})
	}
}

func dropStale(t *testing.T, d *Datapath, s *plan.Service, want int) {
	t.Helper()
	n, err := d.DropStaleFlows(context.Background(), s, plan.Backend{Addr: backend11})
	if err != nil || n != want {
		t.Fatalf("DropStaleFlows(%s, %s) = %d, %v; want %d", s.Name, backend11, n, err, want)
	}
}

func listenTCP(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestKernelUnansweredFlowsGetTheTimeoutPolicy: a nat service's new flows carry Sluice's
// conntrack timeout policy, so an unanswered datagram flow lives 5 s instead of the kernel's 30 s.
// An Apply after someone deleted the table creates the policies again. Under
// nft.half_open_timeouts false they keep the kernel's.
func TestKernelUnansweredFlowsGetTheTimeoutPolicy(t *testing.T) {
	if _, err := exec.LookPath("conntrack"); err != nil {
		testutil.Missing(t, "needs conntrack: %v", err)
	}
	inFreshNetns(t, func() {
		client, _ := natTopology(t)
		d := newTestDatapath(t)
		p := twoBackendPlan("nat", 0, service("dns", "udp", "10.91.9.100", 54, 54))
		apply(t, d, p)
		runNFT(t, "delete table inet sluice")
		d.Resync()
		policy := ctTimeouts["udp"].policy[0].seconds
		for i, kernel := range []bool{false, true} {
			p.Services[0].KernelTimeouts = kernel
			apply(t, d, p)
			c, err := dialFrom(t, client, "udp4", 42000+i, "10.91.9.100:54")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("q")); err != nil { // nobody answers on 10.91.2.11:54
				t.Fatal(err)
			}
			out, err := exec.Command("conntrack", "-L", "-p", "udp", "--orig-dst", "10.91.9.100", "--sport", strconv.Itoa(42000+i)).Output()
			if err != nil {
				t.Fatalf("conntrack -L: %v", err)
			}
			fields := strings.Fields(string(out))
			if len(fields) < 3 || !strings.Contains(string(out), "[UNREPLIED]") {
				t.Fatalf("conntrack -L: no unanswered flow:\n%s", out)
			}
			timeout, err := strconv.Atoi(fields[2])
			switch {
			case err != nil:
				t.Fatalf("conntrack -L: %v:\n%s", err, out)
			case !kernel && timeout > policy:
				t.Errorf("the unanswered flow expires in %d s, want at most %d:\n%s", timeout, policy, out)
			case kernel && timeout <= policy:
				t.Errorf("under half_open_timeouts false the unanswered flow expires in %d s, want the kernel's 30:\n%s", timeout, out)
			}
		}
	})
}
