package bench

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestFloodOptionsCheck(t *testing.T) {
	ok := FloodOptions{Duration: 5 * time.Second, Rounds: 3, Rate: 1000}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for flag, o := range map[string]FloodOptions{
		"--duration": {Duration: 500 * time.Millisecond, Rounds: 1},
		"--rounds":   {Duration: time.Second, Rounds: 0},
		"--rate":     {Duration: time.Second, Rounds: 1, Rate: -1},
	} {
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: %v, want an error naming %s", o, err, flag)
		}
	}
}

func TestSelectFloodCandidates(t *testing.T) {
	all, _, err := selectFloodCandidates(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"nft-nat", "nft-nat-synproxy", "ebpf-nat"} {
		if all[i].Name() != want || all[i].protection == "" {
			t.Errorf("candidate %d: %s (%q), want %s with its protection", i, all[i].Name(), all[i].protection, want)
		}
	}
	one, _, err := selectFloodCandidates([]string{"nft-nat-synproxy"})
	if err != nil || len(one) != 1 || one[0].Name() != "nft-nat-synproxy" {
		t.Errorf("selecting nft-nat-synproxy: %v, %v", one, err)
	}
	if _, _, err := selectFloodCandidates([]string{"nft-dsr"}); err == nil || !strings.Contains(err.Error(), "--candidates") {
		t.Errorf("an unknown candidate: %v, want an error naming --candidates", err)
	}
}

func TestFloodLoadPaces(t *testing.T) {
	targets := make([]netip.AddrPort, 3)
	paced := FloodOptions{Duration: 5 * time.Second, Rate: 1000}.load(targets)
	if paced.Conns != 48 || paced.Threads != 3 || !paced.Close || paced.Pace != 48*time.Millisecond || paced.Duration != 5*time.Second {
		t.Errorf("paced at 1000/s: %+v, want 48 connections of one request, each pausing 48ms", paced)
	}
	if open := (FloodOptions{Duration: time.Second}).load(targets); open.Pace != 0 {
		t.Errorf("closed-loop: pace %s", open.Pace)
	}
}

func TestCountForgedHalfOpen(t *testing.T) {
	// testdata/proc/net/tcp: 10.91.1.2 (the client) and 1.2.3.4 (forged) in SYN_RECV, 5.6.7.8
	// established, a listener.
	tcp, err := fixtureProc(t).NetTCP()
	if err != nil {
		t.Fatal(err)
	}
	if n := countForgedHalfOpen(tcp); n != 1 {
		t.Errorf("%d forged half-open connections, want 1", n)
	}
}

func TestParseNstat(t *testing.T) {
	m := parseNstat("#kernel\nTcpExtListenDrops               7                  0.0\nTcpExtSyncookiesSent 12 0.0\n")
	if m["TcpExtListenDrops"] != 7 || m["TcpExtSyncookiesSent"] != 12 || len(m) != 2 {
		t.Errorf("parsed %v", m)
	}
}
