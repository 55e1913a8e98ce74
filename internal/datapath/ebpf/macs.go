package ebpf

import "fmt"

// XDP has no packet type, so sluice_xdp tells a frame for another host's MAC (what a switch floods
// to every port once the node holding that MAC is gone) by comparing its destination with the
// ingress interface's MAC in if_macs. The loader keeps if_macs equal to the MACs of the
// interfaces the XDP program runs on, reading the interfaces and the map (one entry per
// interface) at every Apply, so that a changed MAC is picked up by the next Apply or resync. On tc
// the map is empty: sluice_tc reads skb->pkt_type instead.

// ifMACs is what if_macs holds: ifindex to MAC.
type ifMACs map[uint32]sluiceIfMac

// macsFor is what if_macs must hold for the program running on the targets in an attach mode.
// An interface without an Ethernet address gets no entry: the program balances all it receives.
func macsFor(mode AttachMode, targets map[string]target) ifMACs {
	want := ifMACs{}
	if mode != AttachXDP {
		return want
	}
	for _, t := range targets {
		var v sluiceIfMac
		if len(t.mac) == len(v.Addr) {
			copy(v.Addr[:], t.mac)
			want[uint32(t.ifindex)] = v
		}
	}
	return want
}

// putMACs writes the entries of want that if_macs lacks or holds otherwise, and returns the
// ifindexes of the entries it holds beyond want, for deleteAll once the program left them.
func putMACs(w *writer, m *kernelMaps, want ifMACs) ([]uint32, error) {
	if n := m.IfMacs.MaxEntries(); uint32(len(want)) > n {
		return nil, fmt.Errorf("XDP on %d interfaces: the program records the MACs of at most %d", len(want), n)
	}
	have := ifMACs{}
	if err := readAll(m.IfMacs, func(k uint32, v sluiceIfMac) bool { have[k] = v; return true }); err != nil {
		return nil, err
	}
	var stale []uint32
	for k := range have {
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			if err := w.put(m.IfMacs, k, v); err != nil {
				return nil, err
			}
		}
	}
	return stale, nil
}
