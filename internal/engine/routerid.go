package engine

import (
	"errors"
	"net"
	"net/netip"
)

// firstIPv4Address is the node's default BGP identifier: the first IPv4 address, by interface
// index, of an interface that is up and not loopback.
func firstIPv4Address() (netip.Addr, error) {
	ifaces, err := net.Interfaces() // sorted by index
	if err != nil {
		return netip.Addr{}, err
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && ip.IsGlobalUnicast() {
					return ip.Unmap(), nil
				}
			}
		}
	}
	return netip.Addr{}, errors.New("the node has no IPv4 address on an interface that is up")
}
