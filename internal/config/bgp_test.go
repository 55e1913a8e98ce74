package config

import (
	"testing"
	"time"
)

// TestBGPPeerBFD: bfd: true takes the default timers, and set ones are kept.
func TestBGPPeerBFD(t *testing.T) {
	c, err := Parse("bfd.yaml", []byte(`bgp:
  asn: 65100
  peers:
    - {address: 10.0.0.1, asn: 65000, bfd: true}
    - {address: 10.0.0.2, asn: 65000, bfd: true, bfd_interval: 50ms, bfd_multiplier: 5}
    - {address: 10.0.0.3, asn: 65000}
services: []
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		on         bool
		interval   time.Duration
		multiplier int
	}{{true, 100 * time.Millisecond, 3}, {true, 50 * time.Millisecond, 5}, {false, 100 * time.Millisecond, 3}} {
		p := &c.BGP.Peers[i]
		if p.BFD != want.on || p.BFDIntervalOrDefault() != want.interval || p.BFDMultiplierOrDefault() != want.multiplier {
			t.Errorf("peers[%d]: bfd %v, %s x %d; want %v, %s x %d", i, p.BFD, p.BFDIntervalOrDefault(), p.BFDMultiplierOrDefault(), want.on, want.interval, want.multiplier)
		}
	}
}
