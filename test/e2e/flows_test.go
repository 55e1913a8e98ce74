package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Bounds of the connections TestFlows holds open: at least flowsHeld, more (up to flowsMaxHeld)
// until two backends answer, so that --backend has flows to leave out.
const (
	flowsHeld    = 4
	flowsMaxHeld = 12
)

// TestFlows: on both datapaths, in every mode, `sluice flows web` lists each of a few held
// keep-alive connections with its client address and port, the VIP and the backend that answered
// it, through a daemon and, without one, from the kernel; --backend keeps only one backend's
// flows and --limit 1 lists one flow and counts the others as more.
func TestFlows(t *testing.T) {
	requireLab(t)
	t.Cleanup(func() { flush(t) })
	for _, f := range slices.Concat(nftFlavors, ebpfFlavors) {
		t.Run(f.Datapath+"-"+f.Name, func(t *testing.T) {
			svc := webService("maglev", equalPool(false))
			t.Run("daemon", func(t *testing.T) {
				freshBalancer(t)
				d := startDaemon(t, writeConfig(t, "sluice.yaml", f.Config(svc)))
				checkFlows(t, f, svc, d.cli)
			})
			t.Run("kernel", func(t *testing.T) {
				freshBalancer(t)
				apply(t, f.Config(svc))
				checkFlows(t, f, svc, func(args ...string) cliResult { return sluice(t, args...) })
			})
		})
	}
}

// heldFlow is one held connection: its client address and port and the backend that answered it.
type heldFlow struct {
	client  netip.AddrPort
	backend netip.AddrPort
}

// listedFlows and listedFlow are what `sluice flows -o json` prints, decoded independently of
// the product's types.
type listedFlows struct {
	Flows []listedFlow `json:"flows"`
	Total int          `json:"total"`
}

type listedFlow struct {
	Protocol  string `json:"protocol"`
	Client    string `json:"client"`
	VIP       string `json:"vip"`
	Backend   string `json:"backend"`
	State     string `json:"state"`
	ExpiresIn uint32 `json:"expires_in"`
	NATPort   uint16 `json:"nat_port"`
}

// holdFlows opens keep-alive connections to svc from the client, each answered once, until there
// are flowsHeld of them on at least two backends; they close when the test ends.
func holdFlows(t *testing.T, svc Service) []heldFlow {
	t.Helper()
	var held []heldFlow
	backends := map[netip.AddrPort]bool{}
	for len(held) < flowsHeld || len(backends) < 2 && len(held) < flowsMaxHeld {
		k := dialKeepAlive(t, svc.Addr())
		name, err := k.get()
		if err != nil {
			t.Fatalf("connection %d: %v", len(held)+1, err)
		}
		local := k.c.LocalAddr().(*net.TCPAddr).AddrPort()
		h := heldFlow{
			client:  netip.AddrPortFrom(local.Addr().Unmap(), local.Port()),
			backend: netip.AddrPortFrom(theLab.BackendAddr(backendIndex(name), false), svc.Port),
		}
		held = append(held, h)
		backends[h.backend] = true
	}
	return held
}

// checkFlows holds connections to svc and checks what `sluice flows` says of them, running sluice
// with cli (through a daemon or on the kernel).
func checkFlows(t *testing.T, f Flavor, svc Service, cli func(args ...string) cliResult) {
	held := holdFlows(t, svc)
	flows := func(args ...string) listedFlows {
		t.Helper()
		args = append([]string{"flows", svc.Name, "-o", "json"}, args...)
		r := cli(args...)
		if r.Err != nil {
			t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
		}
		var l listedFlows
		if err := json.Unmarshal([]byte(r.Stdout), &l); err != nil {
			t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, r.Stdout)
		}
		if l.Total < len(l.Flows) {
			t.Fatalf("sluice %s: total %d below the %d flows listed\n%s", strings.Join(args, " "), l.Total, len(l.Flows), r.Stdout)
		}
		return l
	}
	wantState := map[string]string{"nft": "ESTABLISHED", "ebpf": "ACTIVE"}[f.Datapath]
	if f.Datapath == "nft" && f.Mode == "dsr" {
		wantState = "" // the flow map holds no state
	}

	all := flows()
	t.Logf("%d flows listed of %d, for %d held connections", len(all.Flows), all.Total, len(held))
	if all.Total != len(all.Flows) {
		t.Errorf("the default limit left out %d flows of %d", all.Total-len(all.Flows), all.Total)
	}
	for _, h := range held {
		i := slices.IndexFunc(all.Flows, func(l listedFlow) bool { return l.Client == h.client.String() })
		if i < 0 {
			t.Errorf("the connection from %s (answered by %s) is not listed: %+v", h.client, h.backend, all.Flows)
			continue
		}
		l := all.Flows[i]
		if l.Protocol != "tcp" || l.VIP != svc.Addr().String() || l.Backend != h.backend.String() || l.State != wantState {
			t.Errorf("the connection from %s to %s answered by %s is listed as %+v, want tcp, state %q", h.client, svc.Addr(), h.backend, l, wantState)
		}
		if fullnat := f.Mode == "fullnat"; fullnat != (l.NATPort != 0) {
			t.Errorf("the %s connection from %s is listed with NAT port %d", f.Mode, h.client, l.NATPort)
		}
	}

	one := held[0].backend
	for _, filter := range []string{one.String(), one.Addr().String()} {
		got := flows("--backend", filter)
		// A stray packet may add a flow since the first listing (see below): every held
		// connection to that backend must be listed, and nothing to another backend.
		var clients []string
		for _, l := range got.Flows {
			clients = append(clients, l.Client)
			if l.Backend != one.String() {
				t.Errorf("--backend %s lists a flow to %s: %+v", filter, l.Backend, l)
			}
		}
		for _, h := range held {
			if h.backend == one && !slices.Contains(clients, h.client.String()) {
				t.Errorf("--backend %s lists %v (total %d), without the held connection from %s", filter, clients, got.Total, h.client)
			}
		}
		if got.Total != len(got.Flows) {
			t.Errorf("--backend %s lists %d flows of a total %d", filter, len(got.Flows), got.Total)
		}
	}

	// The held connections stay listed; a stray packet (a late FIN of a closed connection) may add
	// a flow between two listings, so each listing is checked against its own total.
	limited := flows("--limit", "1")
	if len(limited.Flows) != 1 || limited.Total < len(held) {
		t.Errorf("--limit 1 lists %d flows of a total %d, want 1 of at least %d", len(limited.Flows), limited.Total, len(held))
	}
	table := cli("flows", svc.Name, "--limit", "1")
	var more int
	if table.Err != nil || !strings.Contains(table.Stdout, " more (--limit)") {
		t.Errorf("sluice flows --limit 1: %v, want \"... N more (--limit)\" in\n%s%s", table.Err, table.Stdout, table.Stderr)
	} else if _, err := fmt.Sscanf(table.Stdout[strings.LastIndex(table.Stdout, "... "):], "... %d more", &more); err != nil || more < len(held)-1 {
		t.Errorf("sluice flows --limit 1 says %d more, want at least %d:\n%s", more, len(held)-1, table.Stdout)
	}
}
