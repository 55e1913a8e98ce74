package cli

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

// printIPVS writes the services in ipvsadm -Ln's layout, for the scripts and eyes used to it:
// Masq for nat and fullnat, Route for dsr, IPVS's scheduler names (maglev is mh), InActConn the
// flows that are no longer active. A port range, which IPVS does not have, stays one line.
func printIPVS(w io.Writer, services []engine.ServiceView) error {
	var b strings.Builder
	b.WriteString("IP Virtual Server version 1.2.1 (size=4096)\n")
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	b.WriteString("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	for _, s := range services {
		sched := s.Scheduler
		if sched.Canonical() == config.SchedulerMaglev {
			sched = config.SchedulerMH
		}
		fmt.Fprintf(&b, "%-4s %s %s%s\n", strings.ToUpper(string(s.Protocol)), hostPort(s.VIP.String(), s.Ports), sched, ipvsFlags(s))
		forward := cmp.Or(ipvsForwards[s.Mode], "Masq")
		for _, be := range s.Backends {
			port := s.Ports
			if be.Port != 0 {
				port = fmt.Sprint(be.Port)
			}
			inactive := uint64(0)
			if be.Flows > be.ActiveFlows {
				inactive = be.Flows - be.ActiveFlows
			}
			fmt.Fprintf(&b, "  -> %-28s %-7s %-6d %-10d %d\n", hostPort(be.Address, port), forward, be.ProgrammedWeight, be.ActiveFlows, inactive)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ipvsFlags is what ipvsadm -Ln prints after a service's scheduler: its scheduler flags in
// parentheses (sh-port), then "persistent SECONDS" and, for a granularity coarser than one
// address, "mask 255.255.255.0" (IPv4) or "mask 64" (IPv6).
func ipvsFlags(s engine.ServiceView) string {
	var b strings.Builder
	if s.SHPort {
		b.WriteString(" (sh-port)")
	}
	timeout := s.PersistenceTimeout.Or(0)
	if timeout <= 0 {
		return b.String()
	}
	fmt.Fprintf(&b, " persistent %d", int64(timeout/time.Second))
	switch prefix := s.PersistencePrefix; {
	case prefix == 0:
	case s.VIP.Is4() && prefix < 32:
		fmt.Fprintf(&b, " mask %s", net.IP(net.CIDRMask(prefix, 32)))
	case s.VIP.Is6() && prefix < 128:
		fmt.Fprintf(&b, " mask %d", prefix)
	}
	return b.String()
}

// ipvsForwards are ipvsadm's names of the direct modes' forwarding (Masq for the others).
var ipvsForwards = map[config.Mode]string{config.ModeDSR: "Route", config.ModeTunnel: "Tunnel"}
