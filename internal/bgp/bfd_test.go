package bgp

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"google.golang.org/protobuf/proto"
)

// TestBFDConfig: a peer's BFD gets its defaults, bad timers are refused, GoBGP gets the
// interval in microseconds on both of its intervals, and a change of the timers is a change of
// the session (which Configure restarts, as for a hold time).
func TestBFDConfig(t *testing.T) {
	peer := Peer{Address: netip.MustParseAddr("10.91.3.1"), ASN: 65000, BFD: &BFD{}}
	n, err := peer.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if *n.BFD != (BFD{Interval: 100 * time.Millisecond, Multiplier: 3}) {
		t.Errorf("defaults: %+v", *n.BFD)
	}
	if peer.BFD.Interval != 0 {
		t.Error("normalize changed the caller's BFD")
	}
	for _, bad := range []time.Duration{time.Microsecond, 2 * time.Minute, 1500*time.Nanosecond + time.Millisecond} {
		p := peer
		p.BFD = &BFD{Interval: bad}
		if _, err := p.normalize(); err == nil || !strings.Contains(err.Error(), "bfd: interval") {
			t.Errorf("interval %v: %v", bad, err)
		}
	}
	got := apiPeer(n).GetBfd()
	want := &api.BfdPeerConfig{Enabled: true, Port: 3784, DesiredMinimumTxInterval: 100000, RequiredMinimumReceive: 100000, DetectionMultiplier: 3}
	if !proto.Equal(got, want) {
		t.Errorf("GoBGP's BFD config %v, want %v", got, want)
	}
	if apiPeer(Peer{Address: peer.Address, ASN: 65000}).GetBfd() != nil {
		t.Error("a peer without BFD has a GoBGP BFD config")
	}
	other := n
	other.BFD = &BFD{Interval: 100 * time.Millisecond, Multiplier: 3}
	off := n
	off.BFD = nil
	slower := n
	slower.BFD = &BFD{Interval: 200 * time.Millisecond, Multiplier: 3}
	if !n.sessionEqual(other) || n.sessionEqual(off) || n.sessionEqual(slower) || off.sessionEqual(n) {
		t.Error("sessionEqual does not tell BFD settings apart")
	}
}

// TestBFDDownIsTheReason: GoBGP's warning that a peer's BFD session expired, which it logs just
// before it resets the BGP session, makes that reset's peer_down event and the last error say
// BFD; the next down without one says its own reason.
func TestBFDDownIsTheReason(t *testing.T) {
	rec := &recorder{}
	s := newSessions(rec.notify)
	defer s.stop()
	addr := netip.MustParseAddr("10.91.3.1")
	s.track(addr)
	gen := s.newGeneration("")
	log := slog.New(gobgpLog{Handler: slog.DiscardHandler, level: &slog.LevelVar{}, sessions: s})
	now := time.Now()
	s.observe(gen, addr, StateEstablished, "", now)
	log.Warn("Expired", slog.String("Topic", "bfd"), slog.String("Peer", addr.String()))
	s.observe(gen, addr, StateIdle, "notification-sent cease administrative reset", now)
	s.observe(gen, addr, StateEstablished, "", now)
	log.Warn("Expired", slog.String("Topic", "bfd"), slog.String("Peer", "10.91.3.2"))
	s.observe(gen, addr, StateIdle, "hold-timer-expired", now)
	waitFor(t, "four events", func() bool { return len(rec.all()) == 4 })
	ev := rec.all()
	if ev[1].Kind != PeerDown || !strings.HasPrefix(ev[1].Reason, "BFD down: no BFD packet") {
		t.Errorf("down event after BFD expired: %+v", ev[1])
	}
	if ev[3].Kind != PeerDown || ev[3].Reason != "hold-timer-expired" {
		t.Errorf("down event after another peer's BFD expired: %+v", ev[3])
	}
}
