package lab

// An active/backup pair of Sluice nodes in a fleet lab (docs/ha.md): nodes 1 and 2 run the
// daemon, keepalived's VRRP holds the addresses the router and the backends route through on the
// master, and a track script running `sluice node check` makes a node that should not take
// traffic give them up.

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
)

// VRRPInstance is a VRRP address a pair's master holds: its instance's name, interface and
// virtual router id.
type VRRPInstance struct {
	Name  string
	Iface string
	VRID  int
	Addr  netip.Addr
}

// PairKeepalivedConfig is the keepalived.conf of pair node i (1 or 2; 1 has the higher priority
// and preempts), whose track script asks the daemon behind socket with the sluice binary, holding
// instances, in one sync group when there are several so that they move together. VRRPv3
// adverts every 100 ms: a backup takes over about 0.35 s after the master's last advert. The
// script starts failed (init_fail), so a node that (re)starts takes the addresses only after its
// daemon said it is ready twice.
func PairKeepalivedConfig(sluice, socket string, i int, instances ...VRRPInstance) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global_defs {
  router_id sluice-lb%d
  vrrp_version 3
  script_user root
  enable_script_security
}

vrrp_script sluice {
  script "%s --socket %s node check"
  interval 1
  timeout 2
  fall 2
  rise 2
  init_fail
}
`, i, sluice, socket)
	if len(instances) > 1 {
		b.WriteString("\nvrrp_sync_group pair {\n  group {\n")
		for _, in := range instances {
			fmt.Fprintf(&b, "    %s\n", in.Name)
		}
		b.WriteString("  }\n}\n")
	}
	for _, in := range instances {
		fmt.Fprintf(&b, `
vrrp_instance %s {
  state BACKUP
  interface %s
  virtual_router_id %d
  priority %d
  advert_int 0.1
  virtual_ipaddress {
    %s/24
  }
  track_script {
    sluice
  }
}
`, in.Name, in.Iface, in.VRID, 200-50*i, in.Addr)
	}
	return b.String()
}

// VRRPHolders lists the balancers (1-based, ascending) whose interface iface holds addr: one
// when VRRP has settled, none during a takeover, two when both nodes think they are master.
func (l *Lab) VRRPHolders(iface string, addr netip.Addr) ([]int, error) {
	var holders []int
	for i := 1; i <= l.Balancers; i++ {
		err := WithHandle(l.BalancerNSOf(i), func(h *netlink.Handle) error {
			link, err := h.LinkByName(iface)
			if err != nil {
				return err
			}
			addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == addr {
					holders = append(holders, i)
					return nil
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("lab: addresses of %s on balancer %d: %w", iface, i, err)
		}
	}
	return holders, nil
}
