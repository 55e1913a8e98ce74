package config

import (
	"fmt"
	"slices"
	"strings"
)

// MaxEBPFVIPPorts is the most (VIP, port, protocol) entries the ebpf datapath holds, all services
// together: bpf/constants.h MAX_VIPS (a port range takes one per port).
const MaxEBPFVIPPorts = 65536

// MaxPortRanges is the most entries a service's ports list may hold: each is an element of the
// nft dispatch maps and a record slot on ebpf. Ranges ("8000-8010") cover any number of ports.
const MaxPortRanges = 32

// PortList is the ports of a service that spans several (IPVS fwmark services, nftlb's
// virtual-ports): single ports and ranges, sharing one backend set and one table.
type PortList []Range

// AllPorts is the service's ports: its ports list, or its one port or range.
func (s *Service) AllPorts() PortList {
	if len(s.Ports) > 0 {
		return s.Ports
	}
	return PortList{s.Port}
}

// SetPorts sets the service's ports as an operator writes them: port for one entry, else ports.
func (s *Service) SetPorts(l PortList) {
	s.Port, s.Ports = Range{}, nil
	if len(l) == 1 {
		s.Port = l[0]
	} else {
		s.Ports = l
	}
}

// validatePorts checks port and ports: exactly one is set, each entry is a port or a range in
// bounds, and the entries of a list do not overlap.
func (s *Service) validatePorts(at string, fail func(path, format string, args ...any)) {
	switch {
	case len(s.Ports) > 0 && !s.Port.IsZero():
		fail(at+".ports", "port and ports are both set: list every port in ports")
		return
	case len(s.Ports) == 0 && s.Port.IsZero():
		fail(at+".port", "%q is not a port in %s (a service needs a port, a range like 8000-8010, or a list in ports)", "0", portBounds)
		return
	case len(s.Ports) == 0:
		validateRange(at+".port", s.Port, fail)
		return
	case len(s.Ports) > MaxPortRanges:
		fail(at+".ports", "%d entries, over the limit of %d: merge neighbouring ports into ranges like 8000-8010", len(s.Ports), MaxPortRanges)
		return
	}
	for i, r := range s.Ports {
		path := fmt.Sprintf("%s.ports[%d]", at, i)
		if !validateRange(path, r, fail) {
			continue
		}
		for j, o := range s.Ports[:i] {
			if o.Err() == nil && o.overlaps(r) {
				fail(path, "%s overlaps ports[%d] (%s)", r, j, o)
				break
			}
		}
	}
}

// validateRange checks that r is a port or a range first-last of ports; it reports whether it is.
func validateRange(path string, r Range, fail func(path, format string, args ...any)) bool {
	if err := r.Err(); err != nil {
		fail(path, "%v", err)
		return false
	}
	if !portBounds.has(r.First) || !portBounds.has(r.Last) || r.First > r.Last {
		fail(path, "%q is not a port in %s or a range first-last", r, portBounds)
		return false
	}
	return true
}

// Canonical is the list sorted by port, with overlapping and adjacent entries merged: the form
// the datapaths program and read back.
func (l PortList) Canonical() PortList {
	sorted := slices.Clone(l)
	slices.SortFunc(sorted, func(a, b Range) int { return a.First - b.First })
	var out PortList
	for _, r := range sorted {
		if n := len(out); n > 0 && r.First <= out[n-1].Last+1 {
			out[n-1].Last = max(out[n-1].Last, r.Last)
			continue
		}
		out = append(out, Range{First: r.First, Last: r.Last})
	}
	return out
}

// Overlaps tells whether a port is in both lists.
func (l PortList) Overlaps(o PortList) bool {
	for _, a := range l {
		for _, b := range o {
			if a.overlaps(b) {
				return true
			}
		}
	}
	return false
}

// Contains tells whether port p is in the list.
func (l PortList) Contains(p int) bool {
	return slices.ContainsFunc(l, func(r Range) bool { return r.Contains(p) })
}

// Count is how many ports the list covers (entries overlap in no valid list).
func (l PortList) Count() int {
	n := 0
	for _, r := range l {
		n += r.Last - r.First + 1
	}
	return n
}

// Single tells whether the list is one port.
func (l PortList) Single() bool { return len(l) == 1 && !l[0].IsRange() }

// First is the lowest port of a canonical list (the health checks' default port); 0 when empty.
func (l PortList) First() int {
	if len(l) == 0 {
		return 0
	}
	return l[0].First
}

// String renders "80", "8000-8010" or "80,443,8000-8010".
func (l PortList) String() string {
	parts := make([]string, len(l))
	for i, r := range l {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// ParsePortList parses what String renders.
func ParsePortList(s string) (PortList, error) {
	var l PortList
	for part := range strings.SplitSeq(s, ",") {
		r, err := ParseRange(part)
		if err != nil {
			return nil, err
		}
		l = append(l, r)
	}
	return l, nil
}

// validateEBPFPorts refuses, on the ebpf datapath, services whose ports need more entries than
// its VIP table holds, as apply would: validate and the importers' checks see it first.
func (c *Config) validateEBPFPorts(fail func(path, format string, args ...any)) {
	if c.Datapath != DatapathEBPF {
		return
	}
	need := 0
	for i := range c.Services {
		ports := c.Services[i].AllPorts()
		if slices.ContainsFunc(ports, func(r Range) bool { return r.Err() != nil }) {
			return // reported with the service
		}
		need += ports.Count()
	}
	if need > MaxEBPFVIPPorts {
		fail("services", "the services' ports need %d VIP entries on datapath ebpf (one per port of each service), over its limit of %d (bpf/constants.h MAX_VIPS): use fewer or narrower port ranges, or datapath nft", need, MaxEBPFVIPPorts)
	}
}
