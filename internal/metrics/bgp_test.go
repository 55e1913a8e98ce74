package metrics

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/bgp"
)

// speaker is a BGP speaker with one established session that sends what it is asked to.
type speaker struct {
	mu        sync.Mutex
	announced []bgp.Announcement
}

func (s *speaker) Configure(context.Context, bgp.Config) error { return nil }
func (s *speaker) Close(context.Context) error                 { return nil }

func (s *speaker) Set(_ context.Context, desired []bgp.Announcement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.announced = slices.Clone(desired)
	return nil
}

func (s *speaker) Status(context.Context) (bgp.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bgp.Status{ASN: 65100, RouterID: netip.MustParseAddr("10.9.0.11"), ListenPort: -1, Peers: []bgp.PeerStatus{{
		Address: netip.MustParseAddr("10.9.0.1"), ASN: 65000, State: bgp.StateEstablished,
		Since: time.Unix(1700000000, 0), PrefixesSent: len(s.announced), Flaps: 2,
	}}, Announced: slices.Clone(s.announced)}, nil
}

// TestBGPMetrics: the session, the announced VIP and the node's state are exported.
func TestBGPMetrics(t *testing.T) {
	m, _, _ := startWith(t, WatchOptions{MaxBackends: DefaultMaxBackends}, slog.New(slog.DiscardHandler))
	want := []string{
		`sluice_bgp_enabled 1`,
		`sluice_bgp_peer_up{peer="10.9.0.1",peer_asn="65000"} 1`,
		`sluice_bgp_peer_established_timestamp_seconds{peer="10.9.0.1",peer_asn="65000"} 1.7e+09`,
		`sluice_bgp_peer_prefixes_sent{peer="10.9.0.1",peer_asn="65000"} 1`,
		`sluice_bgp_peer_flaps_total{peer="10.9.0.1",peer_asn="65000"} 2`,
		`sluice_bgp_vip_announced{vip="10.0.0.100"} 1`,
		`sluice_bgp_announced_prefixes 1`,
		`sluice_node_state{state="active"} 1`,
		`sluice_node_state{state="drained"} 0`,
	}
	var lines []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		lines = scrape(t, m)
		if slices.Contains(lines, `sluice_bgp_announced_prefixes 1`) || time.Now().After(deadline) {
			break
		}
	}
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("no %s in\n%s", w, strings.Join(lines, "\n"))
		}
	}
}
