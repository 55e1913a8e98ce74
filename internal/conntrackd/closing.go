package conntrackd

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// A replicated TCP connection raises no event between established and its end (the event mask
// of internal/datapath/nft), so a peer's replica of a connection that is closing here is still
// ESTABLISHED, with the days-long timeout of that state. When this node asks for the peers'
// table, conntrackd writes those replicas over its own closing entries (it deletes an entry that
// exists and creates the peer's): without a repair, every connection closing at a restart would
// stay in the table as established for days, on this node and, through it, on its peers.
// closingConnections is what the repair needs: taken just before the request, put back once the
// peers' table is in.

// ctKey is a connection by its original tuple.
type ctKey struct {
	src, dst     netip.Addr
	sport, dport uint16
}

// closingState is a closing connection's TCP state and when its entry would have expired.
type closingState struct {
	state   uint8
	expires time.Time
}

// closingConnections are the TCP connections in a closing state (FIN_WAIT to CLOSE) in this
// namespace's conntrack table when it was read.
type closingConnections map[ctKey]closingState

// readClosing reads the closing TCP connections of the calling thread's network namespace.
func readClosing(now time.Time) (closingConnections, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	closing := closingConnections{}
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		flows, err := listFlows(h, family)
		if err != nil {
			return nil, err
		}
		for _, f := range flows {
			if state, ok := tcpState(f); ok && state >= nl.TCP_CONNTRACK_FIN_WAIT && state <= nl.TCP_CONNTRACK_CLOSE {
				closing[keyOf(f)] = closingState{state: state, expires: now.Add(time.Duration(f.TimeOut) * time.Second)}
			}
		}
	}
	return closing, nil
}

// restore puts back, at now, the state and the remaining time of the closing connections that
// the peers' replicas turned established, and returns how many it put back. An entry whose time
// ran out meanwhile gets a second, so that the kernel ends it.
func (c closingConnections) restore(now time.Time) (int, error) {
	if len(c) == 0 {
		return 0, nil
	}
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	restored := 0
	var errs []error
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		flows, err := listFlows(h, family)
		if err != nil {
			return restored, err
		}
		for _, f := range flows {
			was, ok := c[keyOf(f)]
			if state, tcp := tcpState(f); !ok || !tcp || state != nl.TCP_CONNTRACK_ESTABLISHED {
				continue
			}
			f.ProtoInfo = &netlink.ProtoInfoTCP{State: was.state}
			f.TimeOut = uint32(max(was.expires.Sub(now).Round(time.Second), time.Second) / time.Second)
			switch err := h.ConntrackUpdate(netlink.ConntrackTable, family, f); {
			case errors.Is(err, unix.ENOENT): // ended meanwhile
				continue
			case err != nil:
				errs = append(errs, err)
				continue
			}
			restored++
		}
	}
	if len(errs) > 0 {
		return restored, fmt.Errorf("putting back %d closing connections: %w", len(errs), errs[0])
	}
	return restored, nil
}

// listFlows reads one family's conntrack entries. A dump the table's changes interrupted gives
// what it read: a busy table always changes, and what was read is still worth repairing.
func listFlows(h *netlink.Handle, family netlink.InetFamily) ([]*netlink.ConntrackFlow, error) {
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, family)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("reading the conntrack table: %w", err)
	}
	return flows, nil
}

// tcpState is a TCP flow's state; false for another protocol.
func tcpState(f *netlink.ConntrackFlow) (uint8, bool) {
	tcp, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP)
	if !ok || f.Forward.Protocol != unix.IPPROTO_TCP {
		return 0, false
	}
	return tcp.State, true
}

func keyOf(f *netlink.ConntrackFlow) ctKey {
	src, _ := netip.AddrFromSlice(f.Forward.SrcIP)
	dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
	return ctKey{src: src, dst: dst, sport: f.Forward.SrcPort, dport: f.Forward.DstPort}
}
