package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// fakeSpeaker records what the engine asks a BGP speaker to do.
type fakeSpeaker struct {
	mu         sync.Mutex
	configs    []bgp.Config
	announced  []bgp.Announcement
	sets       int
	attempts   int // calls of Configure, refused ones included
	closed     bool
	notify     func(bgp.Event)
	failConfig error
}

func (s *fakeSpeaker) Configure(_ context.Context, c bgp.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.failConfig != nil {
		return s.failConfig
	}
	s.configs = append(s.configs, c)
	return nil
}

func (s *fakeSpeaker) Set(_ context.Context, desired []bgp.Announcement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.announced = slices.Clone(desired)
	s.sets++
	return nil
}

func (s *fakeSpeaker) Status(context.Context) (bgp.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bgp.Status{ASN: 65100, Announced: slices.Clone(s.announced)}, nil
}

func (s *fakeSpeaker) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// prefixes is what the speaker announces now, as text.
func (s *fakeSpeaker) prefixes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	for _, a := range s.announced {
		out = append(out, a.Prefix.String())
	}
	slices.Sort(out)
	return out
}

func (s *fakeSpeaker) configured() []bgp.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.configs)
}

const bgpConfig = `
bgp:
  asn: 65100
  peers: [{address: 10.9.0.1, asn: 65000, hold_time: 9s, communities: ["65100:7"]}]
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    health_check: {type: tcp}
    bgp: {communities: ["65100:80"], med: 5}
    backends: [{address: 10.0.1.1}, {address: 10.0.1.2}]
  - name: dns
    vip: 10.0.0.2
    port: 53
    protocol: udp
    backends: [{address: 10.0.1.1}]
  - name: web6
    vip: fd00::1
    port: 80
    fallback: sorry
    health_check: {type: tcp}
    backends: [{address: fd00:1::1}]
    sorry_servers: [{address: fd00:2::1}]
`

func startAnnouncing(t *testing.T, yaml string) (*harness, *fakeSpeaker) {
	t.Helper()
	speaker := &fakeSpeaker{}
	h := start(t, yaml, Options{
		AnnounceInterval: 5 * time.Millisecond,
		RouterID:         func() (netip.Addr, error) { return netip.MustParseAddr("10.9.0.11"), nil },
		NewAnnouncer: func(notify func(bgp.Event)) Announcer {
			speaker.notify = notify
			return speaker
		},
	})
	return h, speaker
}

func announces(t *testing.T, s *fakeSpeaker, want ...string) {
	t.Helper()
	slices.Sort(want)
	if want == nil {
		want = []string{}
	}
	testutil.Eventually(t, "announcing "+strings.Join(want, " "), func() bool { return slices.Equal(s.prefixes(), want) })
}

// TestAnnouncesWhatCanTakeNewFlows: a VIP is announced once a service on it can take new flows,
// proven by a passed health check (or none to pass); an unchecked, just-started service is not.
func TestAnnouncesWhatCanTakeNewFlows(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32") // dns has no health check; web and web6 wait for theirs
	c := speaker.configured()
	if len(c) != 1 || c[0].ASN != 65100 || c[0].RouterID.String() != "10.9.0.11" || c[0].ListenPort != -1 ||
		len(c[0].Peers) != 1 || c[0].Peers[0].HoldTime != 9*time.Second || c[0].Peers[0].Communities[0] != bgp.Community(65100<<16|7) {
		t.Fatalf("speaker configured with %+v", c)
	}
	view, _ := h.BGP(context.Background())
	if got := viewOf(view, "10.0.0.1"); got.Announced || !strings.Contains(got.Reason, "waiting for the first health check results of web") {
		t.Fatalf("10.0.0.1 before any check: %+v", got)
	}

	h.prober.flip("10.0.1.1:80", true)
	announces(t, speaker, "10.0.0.1/32", "10.0.0.2/32")
	speaker.mu.Lock()
	for _, a := range speaker.announced {
		if a.Prefix.String() == "10.0.0.1/32" && (a.MED == nil || *a.MED != 5 || len(a.Communities) != 1) {
			t.Errorf("web's attributes: %+v", a)
		}
	}
	speaker.mu.Unlock()

	h.prober.flip("10.0.1.1:80", false) // 10.0.1.2 still unproven: web can take flows, none proven
	h.prober.flip("10.0.1.2:80", false)
	announces(t, speaker, "10.0.0.2/32")
	// The withdrawal may come from the first fall (web waiting for 10.0.1.2's first result); the
	// reason settles once the second is in.
	testutil.Eventually(t, "10.0.0.1 withdrawn as no service on it can take new flows", func() bool {
		view, _ := h.BGP(context.Background())
		got := viewOf(view, "10.0.0.1")
		return !got.Announced && strings.Contains(got.Reason, "no service on it can take new flows")
	})

	// web6's only backend falls: its sorry server (never checked) takes the new flows, so the VIP
	// stays announced.
	h.prober.flip("[fd00:1::1]:80", true)
	announces(t, speaker, "10.0.0.2/32", "fd00::1/128")
	h.prober.flip("[fd00:1::1]:80", false)
	testutil.Eventually(t, "web6 on its sorry server", func() bool { return h.weights("web6")["fd00:1::1"] == 0 })
	time.Sleep(20 * time.Millisecond)
	announces(t, speaker, "10.0.0.2/32", "fd00::1/128")
	if !hasEventType(h, EventVIPWithdrawn, "10.0.0.1") || !hasEventType(h, EventVIPAnnounced, "10.0.0.1") {
		t.Fatalf("events: %+v", h.Events(0))
	}
}

// TestWithdrawsWhenTheDatapathFails: a failed apply withdraws every VIP until an apply succeeds.
func TestWithdrawsWhenTheDatapathFails(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32")
	h.dp.FailWith(errors.New("nft: no memory"))
	h.dp.Resync()
	if _, err := h.Update(false, "test", func(c *config.Config) error { c.Services[1].Port = config.Range{First: 54, Last: 54}; return nil }); err != nil {
		t.Fatal(err)
	}
	announces(t, speaker)
	view, _ := h.BGP(context.Background())
	if got := viewOf(view, "10.0.0.2"); !strings.Contains(got.Reason, "the datapath failed to apply: nft: no memory") {
		t.Fatalf("reason %q", got.Reason)
	}
	h.dp.FailWith(nil)
	announces(t, speaker, "10.0.0.2/32")
}

// TestNodeDrainWithdrawsEverythingAndFollowsFlows: a drained node announces nothing, reports
// drained once its flows are gone, and announces again when undrained.
func TestNodeDrainWithdrawsEverythingAndFollowsFlows(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32")
	h.dp.SetActiveFlows("dns", "10.0.1.1", 4)
	n, err := h.DrainNode(context.Background(), time.Minute)
	if err != nil || n.State != NodeDraining || n.InitialFlows != 4 {
		t.Fatalf("drain: %+v, %v", n, err)
	}
	announces(t, speaker)
	if h.Node().State != NodeDraining {
		t.Fatalf("drained with flows left: %+v", h.Node())
	}
	h.dp.SetActiveFlows("dns", "10.0.1.1", 0)
	testutil.Eventually(t, "node drained", func() bool { return h.Node().State == NodeDrained })
	if !hasEventType(h, EventNodeDrained, "no active flows left") {
		t.Fatalf("events: %+v", h.Events(0))
	}
	if again, _ := h.DrainNode(context.Background(), time.Minute); again.State != NodeDrained {
		t.Fatalf("a second drain: %+v", again)
	}
	h.UndrainNode()
	announces(t, speaker, "10.0.0.2/32")
	if h.dp.Plan() == nil || len(h.dp.Plan().Services) != 3 {
		t.Fatal("the drain changed the datapath")
	}
}

// TestBGPSectionChangesReconfigureOnlyWhenChanged: a reload that keeps the bgp section leaves the
// speaker as it is; one that changes it reconfigures it; one that removes it closes it.
func TestBGPSectionChangesReconfigureOnlyWhenChanged(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32")
	if _, err := h.Update(false, "test", func(c *config.Config) error { c.Services[1].Port = config.Range{First: 54, Last: 54}; return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if n := len(speaker.configured()); n != 1 {
		t.Fatalf("configured %d times for a change outside the bgp section", n)
	}
	if _, err := h.Update(false, "test", func(c *config.Config) error {
		c.BGP.Peers = append(c.BGP.Peers, config.BGPPeer{Address: config.IPOf("10.9.0.2"), ASN: 65000})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "reconfigured", func() bool { c := speaker.configured(); return len(c) == 2 && len(c[1].Peers) == 2 })
	if _, err := h.Update(false, "test", func(c *config.Config) error {
		c.BGP = nil
		for i := range c.Services {
			c.Services[i].BGP = nil
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "closed", func() bool { speaker.mu.Lock(); defer speaker.mu.Unlock(); return speaker.closed })
}

// TestShutdownWithdrawsThenCloses: on shutdown every VIP is withdrawn before the speaker closes.
func TestShutdownWithdrawsThenCloses(t *testing.T) {
	h, speaker := startAnnouncing(t, strings.Replace(bgpConfig, "  asn: 65100\n", "  asn: 65100\n  shutdown_grace: 10ms\n", 1))
	announces(t, speaker, "10.0.0.2/32")
	h.Shutdown(context.Background())
	if got := speaker.prefixes(); len(got) != 0 || !speaker.closed {
		t.Fatalf("after shutdown: announcing %v, closed %v", got, speaker.closed)
	}
}

// TestSessionEventsArePublished: the speaker's peer up and down become events.
func TestSessionEventsArePublished(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32")
	speaker.notify(bgp.Event{Kind: bgp.PeerUp, Peer: netip.MustParseAddr("10.9.0.1"), State: "established"})
	speaker.notify(bgp.Event{Kind: bgp.PeerDown, Peer: netip.MustParseAddr("10.9.0.1"), State: "idle", Reason: "hold timer expired"})
	if !hasEventType(h, EventBGPPeerUp, "10.9.0.1: established") || !hasEventType(h, EventBGPPeerDown, "hold timer expired") {
		t.Fatalf("events: %+v", h.Events(0))
	}
}

func viewOf(v BGPView, vip string) VIPView {
	for _, x := range v.VIPs {
		if x.VIP == vip {
			return x
		}
	}
	return VIPView{}
}

func hasEventType(h *harness, kind, text string) bool {
	for _, e := range h.Events(0) {
		if e.Type == kind && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}

// TestTakenListenPortIsRefused: a change to a listen port another socket holds is refused, naming
// bgp.listen_port and the holder; the running config and the speaker stay as they are.
func TestTakenListenPortIsRefused(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32")
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	for _, dryRun := range []bool{true, false} {
		_, err = h.Update(dryRun, "test", func(c *config.Config) error { c.BGP.ListenPort = &port; return nil })
		var errs config.Errors
		if !errors.As(err, &errs) || errs[0].Path != "bgp.listen_port" || !strings.Contains(errs[0].Msg, fmt.Sprintf("port %d is already taken by", port)) ||
			!strings.Contains(errs[0].Msg, fmt.Sprintf("(pid %d)", os.Getpid())) {
			t.Fatalf("dry run %v: a taken listen port: %v", dryRun, err)
		}
	}
	if h.Config().BGP.ListenPort != nil || len(speaker.configured()) != 1 {
		t.Fatalf("the refused change went through: listen port %v, speaker configured %d times", h.Config().BGP.ListenPort, len(speaker.configured()))
	}
}

// TestRefusedSectionBacksOff: a bgp section the speaker refuses is tried again after a delay
// that doubles, not at every announce, and its failure is one event counting the repeats.
func TestRefusedSectionBacksOff(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32")
	speaker.mu.Lock()
	speaker.failConfig = errors.New("bgp: start server: bind: address already in use")
	speaker.attempts = 0
	speaker.mu.Unlock()
	if _, err := h.Update(false, "test", func(c *config.Config) error { c.BGP.ASN = 65101; return nil }); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a second attempt", func() bool { speaker.mu.Lock(); defer speaker.mu.Unlock(); return speaker.attempts >= 2 })
	time.Sleep(100 * 5 * time.Millisecond) // 100 announce intervals
	speaker.mu.Lock()
	attempts := speaker.attempts
	speaker.mu.Unlock()
	if attempts > 10 { // 5, 10, 20, ... 320ms: 7 attempts in 500ms; 100 without a backoff
		t.Errorf("%d attempts to configure in 100 announce intervals", attempts)
	}
	var failed []Event
	for _, e := range h.Events(0) {
		if e.Type == EventBGPFailed {
			failed = append(failed, e)
		}
	}
	if len(failed) != 1 || failed[0].Count < 2 {
		t.Errorf("bgp_failed events: %+v, want one counting the repeats", failed)
	}
	if view, _ := h.BGP(context.Background()); !strings.Contains(view.Failed, "bind: address already in use") {
		t.Errorf("the bgp view does not tell the refusal: %q", view.Failed)
	}
	speaker.mu.Lock()
	speaker.failConfig = nil
	speaker.mu.Unlock()
	testutil.Eventually(t, "the section taken once the speaker can", func() bool {
		c := speaker.configured()
		return len(c) == 2 && c[1].ASN == 65101
	})
	if view, _ := h.BGP(context.Background()); view.Failed != "" {
		t.Errorf("the bgp view still tells a refusal: %q", view.Failed)
	}
}

// TestRetryDelays: the delay doubles for the same section, up to maxRetryDelay, and starts again
// for another one.
func TestRetryDelays(t *testing.T) {
	now := time.Now()
	a, b := &config.BGP{ASN: 1}, &config.BGP{ASN: 2}
	var r retry
	var delays []time.Duration
	for range 9 {
		r = r.after(a, errors.New("no"), now, time.Second)
		delays = append(delays, r.delay)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(delays, want) {
		t.Errorf("delays %v, want %v", delays, want)
	}
	if !r.waits(a.Clone(), now) || r.waits(b, now) || r.waits(a, now.Add(time.Minute)) {
		t.Errorf("waits: same section %v, another %v, after the delay %v", r.waits(a.Clone(), now), r.waits(b, now), r.waits(a, now.Add(time.Minute)))
	}
	if r = r.after(b, errors.New("no"), now, time.Second); r.delay != time.Second {
		t.Errorf("another section's first delay %v", r.delay)
	}
}

// TestBGPOnlyChangeIsAChange: a change of the bgp section alone shows in the result of a dry run
// and of the change, and as a config_changed event, rather than as "no changes".
func TestBGPOnlyChangeIsAChange(t *testing.T) {
	h, speaker := startAnnouncing(t, bgpConfig)
	announces(t, speaker, "10.0.0.2/32")
	for _, dryRun := range []bool{true, false} {
		res, err := h.Update(dryRun, "test", func(c *config.Config) error { c.BGP.ASN = 65101; return nil })
		if err != nil || res.Change.Empty() || len(res.Change.BGP) != 1 || res.Change.BGP[0].Field != "bgp.asn" || res.Change.BGP[0].To != "65101" {
			t.Fatalf("dry run %v: %+v, %v", dryRun, res.Change, err)
		}
	}
	if !hasEventType(h, EventConfigChanged, "test: change bgp.asn") {
		t.Fatalf("events: %+v", h.Events(0))
	}
	testutil.Eventually(t, "the speaker on the new asn", func() bool { c := speaker.configured(); return c[len(c)-1].ASN == 65101 })
}
