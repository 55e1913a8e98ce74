package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// limitedBroadcast is 255.255.255.255, which no service or backend can have.
var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// parseIP checks a service or backend address: IPv4 or IPv6 without a zone, an IPv4-mapped IPv6
// address (::ffff:10.0.0.1) standing for its IPv4 address, and none that no flow can be balanced
// to or from. It returns the address unmapped: the one form Sluice keeps.
func parseIP(ip IP) (netip.Addr, error) {
	a := ip.Addr
	if !a.IsValid() || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", ip)
	}
	a = a.Unmap()
	if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a == limitedBroadcast {
		return netip.Addr{}, fmt.Errorf("%q cannot be used (unspecified, multicast, loopback or broadcast)", ip)
	}
	return a, nil
}

// ParseBackendRef reads how an operator names a backend: "10.0.0.1", "10.0.0.1:8080",
// "[fd00::1]:80" or "[fd00::1]"; the address comes back unmapped, and bare tells that no port
// was given (the port is then 0).
func ParseBackendRef(ref string) (at netip.AddrPort, bare bool, err error) {
	if ap, err := netip.ParseAddrPort(ref); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), false, nil
	}
	addr, err := netip.ParseAddr(strings.Trim(ref, "[]"))
	if err != nil || addr.Zone() != "" {
		return netip.AddrPort{}, false, fmt.Errorf("%q is not an address or address:port", ref)
	}
	return netip.AddrPortFrom(addr.Unmap(), 0), true, nil
}

// vipOwners maps every valid VIP of a config to the first service that has it.
type vipOwners struct {
	first    map[netip.Addr]int
	services []Service
}

func (c *Config) vipOwners() vipOwners {
	v := vipOwners{first: make(map[netip.Addr]int, len(c.Services)), services: c.Services}
	for i := range c.Services {
		if a, err := parseIP(c.Services[i].VIP); err == nil {
			if _, seen := v.first[a]; !seen {
				v.first[a] = i
			}
		}
	}
	return v
}

// has tells whether a is a VIP of the config: an address of the balancer itself.
func (v vipOwners) has(a netip.Addr) bool {
	_, ok := v.first[a]
	return ok
}

// name names the first service whose VIP is a, like "services[2] (web)".
func (v vipOwners) name(a netip.Addr) string {
	i := v.first[a]
	return fmt.Sprintf("services[%d] (%s)", i, v.services[i].Name)
}
