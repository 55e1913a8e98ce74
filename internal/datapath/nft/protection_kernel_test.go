package nft

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// strictTCPTracking sets nf_conntrack_tcp_loose=0 in the test's namespace, as syn_protection needs
// (checkSynproxySysctl).
func strictTCPTracking(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+strings.ReplaceAll(tcpLoose, ".", "/"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// webVIP is the web service of natRig.
var webVIP = netip.MustParseAddrPort("10.91.9.100:80")

// protectedRig is natRig with more client addresses (10.91.1.3, 10.91.1.4) and the web service
// changed by protect; it returns the applied web service.
func protectedRig(t *testing.T, protect func(*plan.Service)) (client netns.NsHandle, d *Datapath, web *plan.Service) {
	t.Helper()
	client, d, dns, w := natRig(t, "nat")
	in(t, client, func() { addAddrs(t, "client1", "10.91.1.3/24", "10.91.1.4/24") })
	p := twoBackendPlan("nat", 0, dns, w)
	web = &p.Services[1]
	protect(web)
	apply(t, d, p)
	return client, d, web
}

// tryDial connects from src in ns to the web service and echoes once; a connection is closed
// when the test ends.
func tryDial(t *testing.T, ns netns.NsHandle, src string) (net.Conn, error) {
	t.Helper()
	dialer := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	var c net.Conn
	var err error
	in(t, ns, func() { c, err = dialer.Dial("tcp4", webVIP.String()) })
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, echo(c)
}

// echo sends a message on c and reads it back.
func echo(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(echoTimeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := c.Read(buf)
	return err
}

// counterPackets reads a named counter of the inet table.
func counterPackets(t *testing.T, d *Datapath, name string) uint64 {
	t.Helper()
	st, err := d.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := st.counters[objKey{knftables.InetFamily, name}]
	if c == nil {
		t.Fatalf("no counter %s", name)
	}
	return deref(c.Packets)
}

// refusedOf reads a service's refusals as the datapath that applied it does (from its plan) and
// as a fresh one does (from the tables), which must agree.
func refusedOf(t *testing.T, d *Datapath, name string) datapath.Refusals {
	t.Helper()
	st, ok, err := d.ServiceStatus(context.Background(), name)
	if err != nil || !ok {
		t.Fatalf("status of %s: %v, found %v", name, err, ok)
	}
	all, err := newTestDatapath(t).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, read := range all {
		if read.Name == name && read.Refused != st.Refused {
			t.Errorf("refusals of %s read from the tables %+v, from the plan %+v", name, read.Refused, st.Refused)
		}
	}
	return st.Refused
}

// TestKernelSourceLists: a denied client and one not allowed cannot connect, and each refusal is
// counted; a list changed while a client holds a connection leaves that connection alone.
func TestKernelSourceLists(t *testing.T) {
	inFreshNetns(t, func() {
		client, d, web := protectedRig(t, func(s *plan.Service) {
			s.SourceAllow = []netip.Prefix{netip.MustParsePrefix("10.91.1.0/30")}
			s.SourceDeny = []netip.Prefix{netip.MustParsePrefix("10.91.1.3/32")}
		})
		held, err := tryDial(t, client, "10.91.1.2")
		if err != nil {
			t.Fatalf("allowed client 10.91.1.2: %v", err)
		}
		for _, src := range []string{"10.91.1.3", "10.91.1.4"} { // denied (deny wins), not allowed
			if _, err := tryDial(t, client, src); err == nil {
				t.Errorf("client %s connected", src)
			}
		}
		var listed uint64
		for _, k := range []serviceKind{denyList, allowList} {
			n := counterPackets(t, d, protectionName(web, k, 0))
			if n == 0 {
				t.Errorf("%s counter: 0 packets refused", k)
			}
			listed += n
		}
		if got, want := refusedOf(t, d, "web"), (datapath.Refusals{SourceList: listed}); got != want {
			t.Errorf("refusals %+v, want %+v", got, want)
		}

		p := twoBackendPlan("nat", 0, service("web", "tcp", "10.91.9.100", 80, 80))
		p.Services[0].SourceAllow = web.SourceAllow
		p.Services[0].SourceDeny = []netip.Prefix{netip.MustParsePrefix("10.91.1.2/32")}
		apply(t, d, p)
		if err := echo(held); err != nil {
			t.Errorf("established connection of 10.91.1.2 after it was denied: %v", err)
		}
		if _, err := tryDial(t, client, "10.91.1.2"); err == nil {
			t.Error("denied client 10.91.1.2 opened a new connection")
		}
		if _, err := tryDial(t, client, "10.91.1.3"); err != nil {
			t.Errorf("client 10.91.1.3, no longer denied: %v", err)
		}
	})
}

// burst opens n connections from src in ns at once and returns how many were refused with a
// reset; the others are closed.
func burst(t *testing.T, ns netns.NsHandle, src string, n int) (refused int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if err := netns.Set(ns); err != nil {
				t.Error(err)
				return
			}
			dialer := net.Dialer{Timeout: echoTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			c, err := dialer.Dial("tcp4", webVIP.String())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				refused++
			case err != nil:
				t.Errorf("dial from %s: %v, want a connection or a reset", src, err)
			default:
				c.Close()
			}
		}()
	}
	wg.Wait()
	return refused
}

// TestKernelRateLimits sends 20 SYNs at once at a rate limit of 5/second with a burst of 5: at
// least 10 are reset and counted; under a per-source limit, another client still connects.
func TestKernelRateLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    serviceKind
		limits  config.Limits
		refused func(n uint64) datapath.Refusals
	}{
		{"service", rateLimit, config.Limits{NewConnectionsPerSecond: 5},
			func(n uint64) datapath.Refusals { return datapath.Refusals{NewConnectionsPerSecond: n} }},
		{"source", srcRateLimit, config.Limits{NewConnectionsPerSourcePerSecond: 5},
			func(n uint64) datapath.Refusals { return datapath.Refusals{NewConnectionsPerSourcePerSecond: n} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inFreshNetns(t, func() {
				client, d, web := protectedRig(t, func(s *plan.Service) { s.Limits, s.LimitAction = tc.limits, config.LimitReset })
				if refused := burst(t, client, "10.91.1.2", 20); refused < 10 {
					t.Errorf("%d of 20 connections refused, want at least 10", refused)
				}
				n := counterPackets(t, d, protectionName(web, tc.kind, 0))
				if n < 10 {
					t.Errorf("%s counter: %d refused, want at least 10", tc.kind, n)
				}
				if got, want := refusedOf(t, d, "web"), tc.refused(n); got != want {
					t.Errorf("refusals %+v, want %+v", got, want)
				}
				if tc.kind == srcRateLimit {
					if _, err := tryDial(t, client, "10.91.1.3"); err != nil {
						t.Errorf("another client under a per-source rate: %v", err)
					}
				}
			})
		})
	}
}

// TestKernelConnectionLimits holds as many connections as the limit allows: the next one is
// reset and counted, and once one of them is closed a new one is accepted. Under a per-source
// limit, another client still connects.
func TestKernelConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    serviceKind
		limits  config.Limits
		refused datapath.Refusals
	}{
		{"service", connsLimit, config.Limits{Connections: 3}, datapath.Refusals{Connections: 1}},
		{"source", srcConnLimit, config.Limits{ConnectionsPerSource: 3}, datapath.Refusals{ConnectionsPerSource: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inFreshNetns(t, func() {
				client, d, web := protectedRig(t, func(s *plan.Service) { s.Limits, s.LimitAction = tc.limits, config.LimitReset })
				var held []net.Conn
				for range 3 {
					c, err := tryDial(t, client, "10.91.1.2")
					if err != nil {
						t.Fatalf("connection %d within the limit: %v", len(held)+1, err)
					}
					held = append(held, c)
				}
				if _, err := tryDial(t, client, "10.91.1.2"); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("4th connection: %v, want a reset", err)
				}
				if n := counterPackets(t, d, protectionName(web, tc.kind, 0)); n != 1 {
					t.Errorf("%s counter: %d refused, want 1", tc.kind, n)
				}
				if got := refusedOf(t, d, "web"); got != tc.refused {
					t.Errorf("refusals %+v, want %+v", got, tc.refused)
				}
				if tc.kind == srcConnLimit {
					if _, err := tryDial(t, client, "10.91.1.3"); err != nil {
						t.Errorf("another client under a per-source limit: %v", err)
					}
				}
				held[0].Close() // its conntrack entry goes to TIME_WAIT: no longer counted
				deadline := time.Now().Add(echoTimeout)
				for {
					_, err := tryDial(t, client, "10.91.1.2")
					if err == nil {
						break
					}
					if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
						t.Fatalf("connection after one was closed: %v", err)
					}
					time.Sleep(50 * time.Millisecond)
				}
				for _, c := range held[1:] {
					if err := echo(c); err != nil {
						t.Errorf("held connection: %v", err)
					}
				}
			})
		})
	}
}

// TestKernelSynproxy: with syn_protection, a client that completes the handshake reaches the
// backend through the synproxy; a SYN alone is answered by the balancer and never reaches the
// backend's namespace, where a counter sees every SYN to port 80; an ACK with a forged cookie is
// dropped. The service's cookie counters tell each apart.
func TestKernelSynproxy(t *testing.T) {
	inFreshNetns(t, func() {
		strictTCPTracking(t)
		client, backends := natTopology(t)
		addAddrs(t, "client0", webVIP.Addr().String()+"/32") // the synproxy answers from the VIP: the balancer owns it
		in(t, backends, func() {
			serveTCPEcho(t)
			for _, cmd := range []string{"add table inet count", "add counter inet count syns",
				"add chain inet count in { type filter hook prerouting priority -400 ; }",
				"add rule inet count in tcp dport 80 tcp flags & (syn | ack) == syn counter name syns"} {
				runNFT(t, cmd)
			}
		})
		d := newTestDatapath(t)
		web := service("web", "tcp", webVIP.Addr().String(), 80, 80)
		web.SYNProtection = true
		p := twoBackendPlan("nat", 0, web)
		apply(t, d, p)
		synCounter := protectionName(&p.Services[0], synCounter, 0)
		backendSYNs := func() int {
			var out []byte
			var err error
			in(t, backends, func() { out, err = exec.Command("nft", "list", "counter", "inet", "count", "syns").Output() })
			m := regexp.MustCompile(`packets (\d+)`).FindSubmatch(out)
			if err != nil || m == nil {
				t.Fatalf("backend SYN counter: %v: %s", err, out)
			}
			n, _ := strconv.Atoi(string(m[1]))
			return n
		}

		echoFrom(t, client, "tcp4", webVIP.String())
		if got := backendSYNs(); got != 1 {
			t.Fatalf("backend saw %d SYNs after one handshake, want 1", got)
		}
		in(t, backends, func() {
			// The synproxy's ACK must open the connection on the backend: recent kernels
			// ignore one whose timestamp echo is wrong (as the synproxy's is with timestamps on).
			if n := netstat(t, "TcpExt", "TSEcrRejected"); n != 0 {
				t.Errorf("the backend ignored %d segments for their timestamp echo", n)
			}
		})
		in(t, client, func() { sendSegment(t, netip.MustParseAddr("10.91.1.2"), webVIP, tcpSYN) })
		deadline := time.Now().Add(echoTimeout)
		for counterPackets(t, d, synCounter) < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := counterPackets(t, d, synCounter); n != 2 {
			t.Fatalf("SYN counter %d, want 2 (the handshake's and the lone SYN)", n)
		}
		in(t, client, func() { sendSegment(t, netip.MustParseAddr("10.91.1.2"), webVIP, tcpACK) })
		want := datapath.SYNCookies{Sent: 2, Validated: 1, Rejected: 1}
		var got datapath.SYNCookies
		for deadline := time.Now().Add(echoTimeout); ; time.Sleep(10 * time.Millisecond) {
			status, _, err := d.ServiceStatus(context.Background(), "web")
			if err != nil {
				t.Fatal(err)
			}
			if got = status.SYNCookies; got == want || time.Now().After(deadline) {
				break
			}
		}
		if got != want {
			t.Errorf("syn cookies %+v, want %+v (one handshake, one lone SYN, one forged ACK)", got, want)
		}
		if got := backendSYNs(); got != 1 {
			t.Errorf("backend saw %d SYNs, want only the completed handshake's", got)
		}
		stats, _ := os.ReadFile("/proc/net/stat/synproxy")
		t.Logf("synproxy statistics:\n%s", stats)
	})
}

// netstat reads a counter of /proc/net/netstat in the current namespace (0 where the kernel has none).
func netstat(t *testing.T, group, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != group+":" || len(values) != len(names) {
			continue
		}
		for j, n := range names {
			if n == name {
				v, err := strconv.Atoi(values[j])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	return 0
}

// TCP flags of the segments sendSegment sends.
const (
	tcpSYN = 0x02
	tcpACK = 0x10
)

// sendSegment sends one TCP segment with flags from src to dst on a raw socket, as a flood does:
// no socket of the sender's waits for the answer. An ACK acknowledges a made-up cookie.
func sendSegment(t *testing.T, src netip.Addr, dst netip.AddrPort, flags byte) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_TCP)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	seg := make([]byte, 20)
	binary.BigEndian.PutUint16(seg[0:], 40404)
	binary.BigEndian.PutUint16(seg[2:], dst.Port())
	binary.BigEndian.PutUint32(seg[4:], 0x51ce0001)
	seg[12] = 5 << 4 // header length: 5 words
	binary.BigEndian.PutUint32(seg[8:], 0x0badc0de)
	seg[13] = flags
	binary.BigEndian.PutUint16(seg[14:], 64240)
	s, d := src.As4(), dst.Addr().As4()
	pseudo := append(append(append(s[:], d[:]...), 0, syscall.IPPROTO_TCP, 0, byte(len(seg))), seg...)
	binary.BigEndian.PutUint16(seg[16:], checksum(pseudo))
	if err := syscall.Sendto(fd, seg, 0, &syscall.SockaddrInet4{Addr: d}); err != nil {
		t.Fatal(err)
	}
}

// checksum is the Internet checksum of b (even length).
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
