package bench

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Workload is one kind of load every candidate gets in turn.
type Workload struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Latency marks a fixed-rate workload: compare p50/p99, not requests/s.
	Latency bool `json:"latency,omitempty"`
	// PerConn marks a workload that opens a connection per request (it gets a wide client port range).
	PerConn bool `json:"per_connection,omitempty"`
	load    func(targets []netip.AddrPort, o LBOptions) wrkLoad
}

// Workloads are the field's measurements, in the order they run: keep-alive and
// per-connection small responses (wrk through a balancer vs direct), large responses and
// random delays (nftables vs nginx), and a paced run where everyone gets the same offered load.
var Workloads = []Workload{
	{Name: "keepalive", Description: "HTTP keep-alive, small response", load: func(t []netip.AddrPort, o LBOptions) wrkLoad {
		return wrkLoad{Targets: t, Conns: 16 * len(t), Path: "/"}
	}},
	{Name: "per-conn", Description: "one request per TCP connection", PerConn: true, load: func(t []netip.AddrPort, o LBOptions) wrkLoad {
		return wrkLoad{Targets: t, Conns: 16 * len(t), Path: "/", Close: true}
	}},
	{Name: "64k", Description: "keep-alive, 64 KiB responses", load: func(t []netip.AddrPort, o LBOptions) wrkLoad {
		return wrkLoad{Targets: t, Conns: 8 * len(t), Path: "/64k"}
	}},
	{Name: "640k", Description: "keep-alive, 640 KiB responses", load: func(t []netip.AddrPort, o LBOptions) wrkLoad {
		return wrkLoad{Targets: t, Conns: 4 * len(t), Path: "/640k"}
	}},
	{Name: "delay", Description: "one request per connection, each answered after a random 100-200 ms", PerConn: true,
		load: func(t []netip.AddrPort, o LBOptions) wrkLoad {
			return wrkLoad{Targets: t, Conns: 32 * len(t), Path: "/delay", Close: true,
				DelayMin: 100 * time.Millisecond, DelayMax: 200 * time.Millisecond}
		}},
	{Name: "latency", Description: "paced keep-alive load, the same offered rate for everyone", Latency: true,
		load: func(t []netip.AddrPort, o LBOptions) wrkLoad {
			conns := 8 * len(t)
			return wrkLoad{Targets: t, Conns: conns, Path: "/", Pace: time.Duration(conns) * time.Second / time.Duration(o.Rate)}
		}},
}

// selectWorkloads returns the named workloads (all for none), in their run order.
func selectWorkloads(names []string) ([]Workload, error) {
	if len(names) == 0 {
		return Workloads, nil
	}
	var out []Workload
	for _, w := range Workloads {
		for _, n := range names {
			if n == w.Name {
				out = append(out, w)
			}
		}
	}
	if len(out) != len(names) {
		return nil, fmt.Errorf("--workloads: unknown workload in %q; known: %s", strings.Join(names, ","), workloadNames())
	}
	return out, nil
}

func workloadNames() string {
	var names []string
	for _, w := range Workloads {
		names = append(names, w.Name)
	}
	return strings.Join(names, ", ")
}
