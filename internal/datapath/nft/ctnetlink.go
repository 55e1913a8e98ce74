package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Conntrack is read and changed over ctnetlink with the netlink library's request type. Its own
// conntrack parser skips an entry's status, which tells an unanswered datagram flow from an
// answered one, so entries are decoded here: the tuples, the status and the TCP state.

// ipsSeenReply is the conntrack status bit of an entry that has seen a reply (IPS_SEEN_REPLY).
const ipsSeenReply = 1 << 1

// ctEntry is a conntrack entry as Sluice reads it: where its flow goes, its TCP state (0 for
// other protocols), whether a reply was seen, and its attributes, which name it for deletion.
type ctEntry struct {
	flow      natFlow
	tcpState  uint8
	seenReply bool
	attrs     []byte
	// orig and reply are the entry's two directions; timeout the seconds until it expires.
	orig, reply ctTuple
	timeout     uint32
}

// active tells whether the entry is an active flow: an established TCP connection (IPVS's
// ActiveConn; handshakes and closing connections are its InActConn) or any UDP flow.
func (e ctEntry) active() bool {
	return e.flow.proto != unix.IPPROTO_TCP || e.tcpState == nl.TCP_CONNTRACK_ESTABLISHED
}

// established tells whether the entry carries a live connection: an established TCP connection
// or an answered datagram flow. Conntrack hands any other entry of a flow (a handshake, a closing
// or closed connection, an unanswered datagram flow) to a new connection that reuses its tuple,
// with its translation: to its backend, even one that has since fallen.
func (e ctEntry) established() bool {
	if e.flow.proto == unix.IPPROTO_TCP {
		return e.tcpState == nl.TCP_CONNTRACK_ESTABLISHED
	}
	return e.seenReply
}

// conntrackFamily is the address family of one IP version's conntrack entries.
func conntrackFamily(v ipv) uint8 {
	if v == ipv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// dumpConntrack reads the conntrack entries of one address family in the current network
// namespace. An interrupted dump (the table changed meanwhile) returns what it read.
func dumpConntrack(family uint8) ([]ctEntry, error) {
	msgs, err := ctRequest(nl.IPCTNL_MSG_CT_GET, unix.NLM_F_DUMP, family, nil).Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil && !errors.Is(err, nl.ErrDumpInterrupted) {
		return nil, fmt.Errorf("reading conntrack: %w", err)
	}
	entries := make([]ctEntry, 0, len(msgs))
	for _, m := range msgs {
		if e, ok := parseCTEntry(m); ok {
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// deleteCTEntry deletes one entry; deleted is false when it was gone already.
func deleteCTEntry(family uint8, e ctEntry) (deleted bool, err error) {
	_, err = ctRequest(nl.IPCTNL_MSG_CT_DELETE, unix.NLM_F_ACK, family, e.attrs).Execute(unix.NETLINK_NETFILTER, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

func ctRequest(msg, flags int, family uint8, attrs []byte) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|msg, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: unix.NFNETLINK_V0})
	if attrs != nil {
		req.AddRawData(attrs)
	}
	return req
}

// parseCTEntry decodes an IPCTNL_MSG_CT_NEW message of a dump.
func parseCTEntry(msg []byte) (ctEntry, bool) {
	if len(msg) < nl.SizeofNfgenmsg {
		return ctEntry{}, false
	}
	e := ctEntry{attrs: msg[nl.SizeofNfgenmsg:]}
	attrs, err := nl.ParseRouteAttr(e.attrs)
	if err != nil {
		return ctEntry{}, false
	}
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case nl.CTA_TUPLE_ORIG:
			e.orig = parseCTTuple(a.Value)
		case nl.CTA_TUPLE_REPLY:
			e.reply = parseCTTuple(a.Value)
		case nl.CTA_TIMEOUT:
			if len(a.Value) == 4 {
				e.timeout = binary.BigEndian.Uint32(a.Value)
			}
		case nl.CTA_STATUS:
			if len(a.Value) == 4 {
				e.seenReply = binary.BigEndian.Uint32(a.Value)&ipsSeenReply != 0
			}
		case nl.CTA_PROTOINFO:
			e.tcpState = parseTCPState(a.Value)
		}
	}
	e.flow = natFlow{proto: e.orig.proto, vip: e.orig.dst.Addr(), vport: e.orig.dst.Port(), backend: e.reply.src}
	return e, e.orig.dst.IsValid() && e.reply.src.IsValid()
}

// ctTuple is one direction of a conntrack entry.
type ctTuple struct {
	proto    uint8
	src, dst netip.AddrPort
}

func parseCTTuple(b []byte) ctTuple {
	var t ctTuple
	var src, dst netip.Addr
	var sport, dport uint16
	for _, a := range nestedAttrs(b) {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case nl.CTA_TUPLE_IP:
			for _, ip := range nestedAttrs(a.Value) {
				addr, _ := netip.AddrFromSlice(ip.Value)
				switch ip.Attr.Type & nl.NLA_TYPE_MASK {
				case nl.CTA_IP_V4_SRC, nl.CTA_IP_V6_SRC:
					src = addr
				case nl.CTA_IP_V4_DST, nl.CTA_IP_V6_DST:
					dst = addr
				}
			}
		case nl.CTA_TUPLE_PROTO:
			for _, p := range nestedAttrs(a.Value) {
				switch p.Attr.Type & nl.NLA_TYPE_MASK {
				case nl.CTA_PROTO_NUM:
					if len(p.Value) == 1 {
						t.proto = p.Value[0]
					}
				case nl.CTA_PROTO_SRC_PORT:
					sport = be16(p.Value)
				case nl.CTA_PROTO_DST_PORT:
					dport = be16(p.Value)
				}
			}
		}
	}
	if src.IsValid() {
		t.src = netip.AddrPortFrom(src.Unmap(), sport)
	}
	if dst.IsValid() {
		t.dst = netip.AddrPortFrom(dst.Unmap(), dport)
	}
	return t
}

// parseTCPState reads the TCP state of an entry's CTA_PROTOINFO; 0 when it holds none.
func parseTCPState(b []byte) uint8 {
	for _, a := range nestedAttrs(b) {
		if a.Attr.Type&nl.NLA_TYPE_MASK != nl.CTA_PROTOINFO_TCP {
			continue
		}
		for _, s := range nestedAttrs(a.Value) {
			if s.Attr.Type&nl.NLA_TYPE_MASK == nl.CTA_PROTOINFO_TCP_STATE && len(s.Value) == 1 {
				return s.Value[0]
			}
		}
	}
	return 0
}

// nestedAttrs decodes the attributes nested in b; none when b is malformed.
func nestedAttrs(b []byte) []syscall.NetlinkRouteAttr {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return nil
	}
	return attrs
}

func be16(b []byte) uint16 {
	if len(b) != 2 {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}
