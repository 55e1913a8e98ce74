package bench

// The bare baselines: the simplest nftables and iptables rules that balance the VIP, with none of
// Sluice's guarantees (no Maglev, no counters, no flow kept across a change, no protection), so
// that a table shows what those guarantees cost. Their exact rules are in docs/BENCHMARKS.md.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicelb/sluice/internal/lab"
)

// bareTable is the name of the bare nftables candidates' tables (ip and netdev).
const bareTable = "bench_bare"

// bareService is one service of a bare candidate: the VIP's port over proto (tcp or udp), spread
// over backends, which are addresses (dnat, masquerade, iptables) or MACs (fwd).
type bareService struct {
	proto    string
	backends []string
}

// bareBackend is a backend a bare candidate spreads over: its address, and the namespace whose
// eth0 holds it (for its MAC, which fwd rewrites to).
type bareBackend struct {
	addr netip.Addr
	ns   string
}

// bareSpread is what a bare candidate balances in one benchmark: its backends per protocol.
type bareSpread struct {
	protos   []string
	backends func(e *Env) []bareBackend
}

// labSpread is `bench lb` and `bench flood`'s: TCP over the lab's backends.
var labSpread = bareSpread{protos: []string{"tcp"}, backends: func(e *Env) []bareBackend {
	out := make([]bareBackend, e.Lab.Backends)
	for i := range out {
		out[i] = bareBackend{e.Lab.BackendAddr(i+1, false), e.Lab.BackendNS(i + 1)}
	}
	return out
}}

// ppsSpread is `bench pps`'s: UDP and TCP over the 100 reals.
var ppsSpread = bareSpread{protos: []string{"udp", "tcp"}, backends: func(e *Env) []bareBackend {
	reals := ppsRealAddrs()
	out := make([]bareBackend, len(reals))
	for k, r := range reals {
		out[k] = bareBackend{r, e.Lab.BackendNS(realNS(k, e.Lab.Backends))}
	}
	return out
}}

// services are the spread's services, the backends by address, or by MAC when byMAC.
func (s bareSpread) services(e *Env, byMAC bool) ([]bareService, error) {
	var targets []string
	macs := map[string]string{}
	for _, b := range s.backends(e) {
		t := b.addr.String()
		if byMAC {
			if macs[b.ns] == "" {
				mac, err := macOf(e, b.ns, "eth0")
				if err != nil {
					return nil, err
				}
				macs[b.ns] = mac
			}
			t = macs[b.ns]
		}
		targets = append(targets, t)
	}
	out := make([]bareService, len(s.protos))
	for i, p := range s.protos {
		out[i] = bareService{proto: p, backends: targets}
	}
	return out, nil
}

// bareNftKind is what a bare nftables candidate does to a new flow.
type bareNftKind string

const (
	// bareDNAT is nat's bare equivalent: a DNAT to a jhash of the source address and port.
	bareDNAT bareNftKind = "dnat"
	// bareMasq is fullnat's: the same DNAT, then masquerade of every DNATed flow.
	bareMasq bareNftKind = "masq"
	// bareFwd is dsr's, stateless like nftlb's dsr: at eth0's ingress, the destination MAC set
	// from a jhash map and the frame forwarded out of eth1.
	bareFwd bareNftKind = "fwd"
)

// bareNft is a bare nftables candidate, programmed by `nft -f` from bareNftRules.
type bareNft struct {
	kind   bareNftKind
	spread bareSpread
}

func (b bareNft) Name() string                    { return "nft-" + string(b.kind) }
func (b bareNft) available() bool                 { return installed("nft") }
func (b bareNft) targets(e *Env) []netip.AddrPort { return vipTargets(e) }
func (b bareNft) pids() []int                     { return nil }

func (b bareNft) start(ctx context.Context, e *Env) error {
	services, err := b.spread.services(e, b.kind == bareFwd)
	if err != nil {
		return err
	}
	var fwd bareFwdPorts
	if b.kind == bareFwd {
		mac, err := macOf(e, e.Lab.BalancerNS(), "eth1")
		if err != nil {
			return err
		}
		fwd = bareFwdPorts{in: "eth0", out: "eth1", mac: mac}
	}
	path, err := e.writeBare(b.Name()+".nft", bareNftRules(b.kind, services, fwd))
	if err != nil {
		return err
	}
	return e.InNS(ctx, e.Lab.BalancerNS(), "nft", "-f", path)
}

func (b bareNft) stop(ctx context.Context, e *Env) error {
	ns := e.Lab.BalancerNS()
	family := "ip"
	if b.kind == bareFwd {
		family = "netdev"
	}
	return errors.Join(e.InNS(ctx, ns, "nft", "delete", "table", family, bareTable), flushConntrack(ns))
}

// writeBare writes a bare candidate's rules to the benchmark's directory and returns the path.
func (e *Env) writeBare(name, rules string) (string, error) {
	if err := os.MkdirAll(e.Dir(), 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(e.Dir(), name)
	return path, os.WriteFile(path, []byte(rules), 0o644)
}

// bareFwdPorts are where fwd takes frames in and out, and the MAC it sends them from.
type bareFwdPorts struct{ in, out, mac string }

// bareNftRules is the nft script of a bare candidate: a verdict map on the VIP and port per
// protocol, to one chain per service spreading new flows by a jhash of the source address and
// port; dnat and masq in a nat prerouting chain of an ip table, fwd in a netdev ingress chain.
func bareNftRules(kind bareNftKind, services []bareService, fwd bareFwdPorts) string {
	var b strings.Builder
	if kind == bareFwd {
		fmt.Fprintf(&b, "table netdev %s {\n\tchain ingress {\n\t\ttype filter hook ingress device %q priority 0; policy accept;\n", bareTable, fwd.in)
	} else {
		fmt.Fprintf(&b, "table ip %s {\n\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n", bareTable)
	}
	for _, s := range services {
		fmt.Fprintf(&b, "\t\tip daddr . %s dport vmap { %s . %d : goto %s-%d }\n", s.proto, lab.VIP4, vipPort, s.proto, vipPort)
	}
	b.WriteString("\t}\n")
	for _, s := range services {
		elems := make([]string, len(s.backends))
		for i, t := range s.backends {
			elems[i] = fmt.Sprintf("%d : %s", i, t)
		}
		pick := fmt.Sprintf("jhash ip saddr . %s sport mod %d map { %s }", s.proto, len(s.backends), strings.Join(elems, ", "))
		fmt.Fprintf(&b, "\tchain %s-%d {\n\t\t", s.proto, vipPort)
		if kind == bareFwd {
			fmt.Fprintf(&b, "ether saddr set %s ether daddr set %s fwd to %q", fwd.mac, pick, fwd.out)
		} else {
			fmt.Fprintf(&b, "dnat to %s", pick)
		}
		b.WriteString("\n\t}\n")
	}
	if kind == bareMasq {
		b.WriteString("\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tct status dnat masquerade\n\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// bareIptables is kube-proxy's iptables DNAT: a chain per service choosing a backend's chain by
// `statistic --mode random` rules, with one iptables backend (nft or legacy).
type bareIptables struct {
	// backend is "nft" or "legacy": the iptables-nft or iptables-legacy binaries.
	backend string
	spread  bareSpread
}

func (b bareIptables) Name() string {
	if b.backend == "legacy" {
		return "iptables-legacy-dnat"
	}
	return "iptables-dnat"
}

func (b bareIptables) binary() string                  { return "iptables-" + b.backend }
func (b bareIptables) available() bool                 { return installed(b.binary() + "-restore") }
func (b bareIptables) targets(e *Env) []netip.AddrPort { return vipTargets(e) }
func (b bareIptables) pids() []int                     { return nil }

func (b bareIptables) start(ctx context.Context, e *Env) error {
	services, err := b.spread.services(e, false)
	if err != nil {
		return err
	}
	path, err := e.writeBare(b.Name()+".rules", iptablesRules(services))
	if err != nil {
		return err
	}
	return e.InNS(ctx, e.Lab.BalancerNS(), b.binary()+"-restore", path)
}

// stop flushes and deletes the chains and, with iptables-nft, removes the nat table, so that no
// empty NAT hook stays registered for the candidates after it (iptables-legacy's stays until the
// namespace goes).
func (b bareIptables) stop(ctx context.Context, e *Env) error {
	ns := e.Lab.BalancerNS()
	err := errors.Join(e.InNS(ctx, ns, b.binary(), "-t", "nat", "-F"), e.InNS(ctx, ns, b.binary(), "-t", "nat", "-X"))
	if b.backend == "nft" {
		err = errors.Join(err, e.InNS(ctx, ns, "nft", "delete", "table", "ip", "nat"))
	}
	return errors.Join(err, flushConntrack(ns))
}

// iptablesRules is the iptables-restore input of kube-proxy's layout for the services: PREROUTING
// jumps to BENCH-SERVICES, which matches each service's VIP and port to its BENCH-SVC chain; that
// chain's rule i jumps to backend i's BENCH-SEP chain with probability 1/(n-i) (the last always),
// which DNATs to the backend.
func iptablesRules(services []bareService) string {
	var chains, rules strings.Builder
	chains.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:BENCH-SERVICES - [0:0]\n")
	rules.WriteString("-A PREROUTING -j BENCH-SERVICES\n")
	for _, s := range services {
		svc := "BENCH-SVC-" + strings.ToUpper(s.proto)
		fmt.Fprintf(&chains, ":%s - [0:0]\n", svc)
		fmt.Fprintf(&rules, "-A BENCH-SERVICES -d %s/32 -p %s -m %s --dport %d -j %s\n", lab.VIP4, s.proto, s.proto, vipPort, svc)
		n := len(s.backends)
		for i := range n {
			sep := fmt.Sprintf("BENCH-SEP-%s-%d", strings.ToUpper(s.proto), i+1)
			fmt.Fprintf(&chains, ":%s - [0:0]\n", sep)
			if i < n-1 {
				fmt.Fprintf(&rules, "-A %s -m statistic --mode random --probability %0.10f -j %s\n", svc, 1/float64(n-i), sep)
			} else {
				fmt.Fprintf(&rules, "-A %s -j %s\n", svc, sep)
			}
		}
		for i, t := range s.backends {
			fmt.Fprintf(&rules, "-A BENCH-SEP-%s-%d -p %s -m %s -j DNAT --to-destination %s:%d\n",
				strings.ToUpper(s.proto), i+1, s.proto, s.proto, t, vipPort)
		}
	}
	return chains.String() + rules.String() + "COMMIT\n"
}

// bareCandidates are the bare baselines over spread: nftables' dnat, masquerade and fwd, and
// kube-proxy's iptables DNAT with the nft and the legacy backend.
func bareCandidates(spread bareSpread) []peer {
	return []peer{
		bareNft{bareDNAT, spread}, bareNft{bareMasq, spread}, bareNft{bareFwd, spread},
		bareIptables{"nft", spread}, bareIptables{"legacy", spread},
	}
}
