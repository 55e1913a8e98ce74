package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	loopback4  = netip.MustParseAddr("127.0.0.1")
	loopback4b = netip.MustParseAddr("127.0.0.2")
	routerID   = netip.MustParseAddr("10.91.1.11")
)

// recorder keeps the events a speaker reported.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) notify(ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func newSpeaker(t *testing.T, notify func(Event)) *Speaker {
	t.Helper()
	s := New(slog.New(slog.NewTextHandler(testWriter{t}, nil)), notify)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// testWriter sends the speaker's log (GoBGP's warnings and errors) to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func config(peers ...Peer) Config {
	return Config{ASN: speakerASN, RouterID: routerID, ListenPort: -1, Peers: peers}
}

func peerStatus(t *testing.T, s *Speaker, addr netip.Addr) PeerStatus {
	t.Helper()
	st, err := s.Status(context.Background())
	must(t, err)
	for _, p := range st.Peers {
		if p.Address == addr {
			return p
		}
	}
	t.Fatalf("status has no peer %v: %+v", addr, st.Peers)
	return PeerStatus{}
}

func waitEstablished(t *testing.T, s *Speaker, r *router) {
	t.Helper()
	waitFor(t, fmt.Sprintf("session with %v", r.addr), func() bool {
		return peerStatus(t, s, r.addr).State == StateEstablished && r.established()
	})
}

func u32(v uint32) *uint32 { return &v }

func communities(list ...string) []Community {
	out := make([]Community, len(list))
	for i, s := range list {
		var high, low uint32
		if _, err := fmt.Sscanf(s, "%d:%d", &high, &low); err != nil {
			panic(err)
		}
		out[i] = Community(high<<16 | low)
	}
	return out
}

func host(s string) netip.Prefix {
	a := netip.MustParseAddr(s)
	return netip.PrefixFrom(a, a.BitLen())
}

func checkRoute(t *testing.T, who string, got route, nextHop netip.Addr, comms []Community, med, localPref *uint32) {
	t.Helper()
	if got.nextHop != nextHop || !slices.Equal(got.communities, comms) || !ptrEqual(got.med, med) || !ptrEqual(got.localPref, localPref) {
		t.Errorf("%s: got next hop %v communities %v med %v local_pref %v; want %v %v %v %v", who,
			got.nextHop, got.communities, show(got.med), show(got.localPref), nextHop, comms, show(med), show(localPref))
	}
}

func show(p *uint32) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// Announcements reach an eBGP and an iBGP router with their own and the peer's attributes,
// once: a repeated Set sends nothing, a changed attribute is sent again, a withdraw removes.
func TestAnnounceAttributesWithdraw(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ebgp := startRouter(t, loopback4, 65000, "")
	ibgp := startRouter(t, loopback4b, speakerASN, "")
	s := newSpeaker(t, nil)

	vip, other, v6 := host("10.91.9.100"), host("10.91.9.101"), host("2001:db8::100")
	desired := []Announcement{
		{Prefix: vip, Attributes: Attributes{Communities: communities("65100:1"), MED: u32(10), LocalPref: u32(200)}},
		{Prefix: other},
		{Prefix: v6},
	}
	must(t, s.Set(ctx, desired)) // before Configure: remembered
	withAttrs := ebgp.peer()
	withAttrs.NextHop = netip.MustParseAddr("192.0.2.1")
	withAttrs.Attributes = Attributes{Communities: communities("65100:7"), MED: u32(50), LocalPref: u32(300)}
	must(t, s.Configure(ctx, config(withAttrs, ibgp.peer())))
	waitEstablished(t, s, ebgp)
	waitEstablished(t, s, ibgp)
	waitFor(t, "both prefixes at both routers", func() bool { return len(ebgp.routes()) == 2 && len(ibgp.routes()) == 2 })

	er, ir := ebgp.routes(), ibgp.routes()
	nh := netip.MustParseAddr("192.0.2.1")
	checkRoute(t, "ebgp "+vip.String(), er[vip], nh, communities("65100:1", "65100:7"), u32(50), nil)
	checkRoute(t, "ebgp "+other.String(), er[other], nh, communities("65100:7"), u32(50), nil)
	checkRoute(t, "ibgp "+vip.String(), ir[vip], loopback4, communities("65100:1"), u32(10), u32(200))
	checkRoute(t, "ibgp "+other.String(), ir[other], loopback4, nil, nil, u32(100))
	if _, ok := er[v6]; ok {
		t.Errorf("the IPv6 prefix reached an IPv4 peer")
	}
	st, err := s.Status(ctx)
	must(t, err)
	if len(st.Announced) != 3 || st.Peers[0].PrefixesSent != 2 || st.Peers[1].PrefixesSent != 2 {
		t.Errorf("status: announced %d, sent %d and %d; want 3, 2, 2", len(st.Announced), st.Peers[0].PrefixesSent, st.Peers[1].PrefixesSent)
	}

	// The same set again sends nothing: the next update the router gets is a marker's. A
	// first marker makes sure nothing sent before (the End-of-RIB) is still on its way.
	mark := func(marker string) {
		desired = append(desired, Announcement{Prefix: host(marker)})
		must(t, s.Set(ctx, desired))
		waitFor(t, "marker "+marker, func() bool { _, ok := ebgp.routes()[host(marker)]; return ok })
	}
	mark("10.91.9.198")
	before := ebgp.updates()
	must(t, s.Set(ctx, slices.Clone(desired)))
	mark("10.91.9.199")
	if got := ebgp.updates() - before; got != 1 {
		t.Errorf("a repeated Set and one new prefix sent %d updates, want 1", got)
	}

	// A changed attribute is announced again; a missing prefix is withdrawn.
	changed := []Announcement{{Prefix: vip, Attributes: Attributes{Communities: communities("65100:2"), MED: u32(10)}}}
	must(t, s.Set(ctx, changed))
	waitFor(t, "the withdrawals and the new community", func() bool {
		r := ibgp.routes()
		return len(r) == 1 && slices.Equal(r[vip].communities, communities("65100:2")) && len(ebgp.routes()) == 1
	})
	checkRoute(t, "ebgp after change", ebgp.routes()[vip], nh, communities("65100:2", "65100:7"), u32(50), nil)
	st, err = s.Status(ctx)
	must(t, err)
	if len(st.Announced) != 1 || st.Announced[0].Prefix != vip {
		t.Errorf("status announced %v, want only %v", st.Announced, vip)
	}
}

// An IPv6 peer gets the IPv6 prefixes only, with the session's address as next hop.
func TestIPv6Peer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := startRouter(t, netip.IPv6Loopback(), 65000, "")
	s := newSpeaker(t, nil)
	must(t, s.Configure(ctx, config(r.peer())))
	v6 := host("2001:db8::100")
	must(t, s.Set(ctx, []Announcement{{Prefix: v6, Attributes: Attributes{Communities: communities("65100:6")}}, {Prefix: host("10.91.9.100")}}))
	waitEstablished(t, s, r)
	waitFor(t, "the IPv6 prefix", func() bool { return len(r.routes()) == 1 })
	checkRoute(t, v6.String(), r.routes()[v6], netip.IPv6Loopback(), communities("65100:6"), nil, nil)
	must(t, s.Set(ctx, nil))
	waitFor(t, "the IPv6 withdrawal", func() bool { return len(r.routes()) == 0 })
}

// A reload restarts only the sessions that changed: adding a peer, changing another's
// attributes leave it alone, a hold time change restarts it, a removed peer is gone.
func TestReloadKeepsUnchangedSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startRouter(t, loopback4, 65000, "")
	b := startRouter(t, loopback4b, 65001, "")
	s := newSpeaker(t, nil)
	vip := host("10.91.9.100")
	must(t, s.Set(ctx, []Announcement{{Prefix: vip}}))
	pa := a.peer()
	pa.HoldTime = 9 * time.Second
	must(t, s.Configure(ctx, config(pa)))
	waitEstablished(t, s, a)
	if got := peerStatus(t, s, a.addr).HoldTime; got != 9*time.Second {
		t.Errorf("negotiated hold time %v, want 9s", got)
	}
	first := peerStatus(t, s, a.addr)
	waitFor(t, "the prefix at a", func() bool { return len(a.routes()) == 1 })

	must(t, s.Configure(ctx, config(pa, b.peer())))
	waitEstablished(t, s, b)
	pa.Communities = communities("65100:9")
	must(t, s.Configure(ctx, config(pa, b.peer())))
	waitFor(t, "a's new community", func() bool {
		return slices.Equal(a.routes()[vip].communities, communities("65100:9"))
	})
	if now := peerStatus(t, s, a.addr); !now.Since.Equal(first.Since) || now.Flaps != 0 || now.State != StateEstablished {
		t.Errorf("a's session changed: since %v -> %v, flaps %d, state %s", first.Since, now.Since, now.Flaps, now.State)
	}
	if downs := countState(a.seen(), failed); downs != 0 {
		t.Errorf("router a saw its session go down %d times", downs)
	}

	must(t, s.Configure(ctx, config(pa)))
	st, err := s.Status(ctx)
	must(t, err)
	if len(st.Peers) != 1 || st.Peers[0].Address != a.addr {
		t.Errorf("after removing b the status lists %+v", st.Peers)
	}
	waitFor(t, "b to see a Cease", func() bool { return hasReason(b.seen(), "(cease)", "(peer deconfigured)") })

	pa.HoldTime = 6 * time.Second
	must(t, s.Configure(ctx, config(pa)))
	waitFor(t, "a's session with a 6s hold time", func() bool {
		p := peerStatus(t, s, a.addr)
		return p.State == StateEstablished && p.HoldTime == 6*time.Second
	})
	if p := peerStatus(t, s, a.addr); p.Flaps != 1 {
		t.Errorf("a hold time change restarted the session with %d flaps, want 1", p.Flaps)
	}
	waitFor(t, "the prefix at a again", func() bool { return len(a.routes()) == 1 })
}

func failed(e routerEvent) bool { return e.reason != "" }

func countState(events []routerEvent, match func(routerEvent) bool) int {
	n := 0
	for _, e := range events {
		if match(e) {
			n++
		}
	}
	return n
}

// hasReason reports whether a session went down for a reason naming all words.
func hasReason(events []routerEvent, words ...string) bool {
	for _, e := range events {
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(e.reason, w) }) {
			return true
		}
	}
	return false
}

// A TCP MD5 password on both sides establishes; a wrong one does not until it is fixed.
func TestMD5Password(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	good := startRouter(t, loopback4, 65000, "s3cret")
	bad := startRouter(t, loopback4b, 65000, "right")
	s := newSpeaker(t, nil)
	pg, pb := good.peer(), bad.peer()
	pg.Password, pb.Password = "s3cret", "wrong"
	must(t, s.Configure(ctx, config(pg, pb)))
	waitEstablished(t, s, good)
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if peerStatus(t, s, bad.addr).State == StateEstablished || bad.established() {
			t.Fatal("a session with the wrong password established")
		}
	}
	waitFor(t, "the wrong password's last error", func() bool {
		return strings.Contains(peerStatus(t, s, bad.addr).LastError, "TCP MD5 password")
	})
	pb.Password = "right"
	must(t, s.Configure(ctx, config(pg, pb)))
	waitEstablished(t, s, bad)
}

// A peer that never answers has the reason of its failed connections as its last error.
func TestLastErrorOfAPeerThatRefuses(t *testing.T) {
	t.Parallel()
	addr := netip.MustParseAddr("127.0.0.3")
	s := newSpeaker(t, nil)
	must(t, s.Configure(context.Background(), config(Peer{Address: addr, Port: freePort(t, addr), ASN: 65000})))
	waitFor(t, "the refused connection as the last error", func() bool {
		p := peerStatus(t, s, addr)
		return p.State != StateEstablished && strings.Contains(p.LastError, "connect: ") && strings.Contains(p.LastError, "connection refused")
	})
}

// The router resetting the session is a flap with peer_down and peer_up events.
func TestFlapEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := startRouter(t, loopback4, 65000, "")
	rec := &recorder{}
	s := newSpeaker(t, rec.notify)
	must(t, s.Configure(ctx, config(r.peer())))
	waitEstablished(t, s, r)
	r.reset()
	waitFor(t, "the session back after the reset", func() bool {
		p := peerStatus(t, s, r.addr)
		return p.Flaps == 1 && p.State == StateEstablished
	})
	waitFor(t, "three events", func() bool { return len(rec.all()) == 3 })
	ev := rec.all()
	if ev[0].Kind != PeerUp || ev[1].Kind != PeerDown || ev[2].Kind != PeerUp || ev[0].Peer != r.addr {
		t.Fatalf("events %+v, want up, down, up for %v", ev, r.addr)
	}
	if !strings.Contains(ev[1].Reason, "notification-received") {
		t.Errorf("peer_down reason %q does not name the notification", ev[1].Reason)
	}
	if p := peerStatus(t, s, r.addr); p.LastError != ev[1].Reason {
		t.Errorf("last error %q, want %q", p.LastError, ev[1].Reason)
	}
}

// A new router id restarts the server and announces again; bad input changes nothing.
func TestIdentityChangeAndBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := startRouter(t, loopback4, 65000, "")
	s := newSpeaker(t, nil)
	vip := host("10.91.9.100")
	must(t, s.Set(ctx, []Announcement{{Prefix: vip}}))
	must(t, s.Configure(ctx, config(r.peer())))
	waitEstablished(t, s, r)
	before := peerStatus(t, s, r.addr)

	dup := config(r.peer(), r.peer())
	if err := s.Configure(ctx, dup); err == nil || !strings.Contains(err.Error(), "peers[1]: address") {
		t.Errorf("duplicate peer: %v", err)
	}
	if err := s.Set(ctx, []Announcement{{Prefix: netip.MustParsePrefix("10.91.9.0/24")}}); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("a /24: %v", err)
	}
	if now := peerStatus(t, s, r.addr); !now.Since.Equal(before.Since) || now.State != StateEstablished {
		t.Errorf("refused input changed the session: %+v -> %+v", before, now)
	}
	if st, _ := s.Status(ctx); len(st.Announced) != 1 {
		t.Errorf("refused input changed the announcements: %v", st.Announced)
	}

	c := config(r.peer())
	c.RouterID = netip.MustParseAddr("10.91.1.12")
	must(t, s.Configure(ctx, c))
	waitFor(t, "the session after the restart", func() bool {
		p := peerStatus(t, s, r.addr)
		return p.State == StateEstablished && p.Flaps == 1 && r.established()
	})
	waitFor(t, "the prefix announced again", func() bool { return len(r.routes()) == 1 })
	if st, _ := s.Status(ctx); st.RouterID != c.RouterID {
		t.Errorf("status router id %v, want %v", st.RouterID, c.RouterID)
	}
}

// Close ends the session with a Cease and leaves no goroutine behind. Not parallel: it
// counts the process's goroutines, from after the router started (GoBGP's own teardown of
// a router peer can strand one goroutine of its outgoing queue; that is the router's).
func TestCloseSendsCeaseLeavesNoGoroutines(t *testing.T) {
	ctx := context.Background()
	r := startRouter(t, loopback4, 65000, "")
	baseline := runtime.NumGoroutine()
	s := New(nil, func(Event) {})
	must(t, s.Configure(ctx, config(r.peer())))
	must(t, s.Set(ctx, []Announcement{{Prefix: host("10.91.9.100")}}))
	waitEstablished(t, s, r)
	must(t, s.Close(ctx))
	waitFor(t, "the router to see a Cease", func() bool { return hasReason(r.seen(), "notification-received", "(cease)") })
	if err := s.Configure(ctx, config(r.peer())); !errors.Is(err, ErrClosed) {
		t.Errorf("Configure after Close: %v", err)
	}
	if err := s.Set(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Set after Close: %v", err)
	}
	var n int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n = runtime.NumGoroutine(); n <= baseline {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Errorf("%d goroutines after Close, %d before:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
}
