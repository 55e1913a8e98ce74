// Package ctnetlink reads and writes entries of the kernel's conntrack table over netlink
// (nfnetlink's ctnetlink subsystem). The netlink library's own conntrack code skips an entry's
// status and cannot write a translated (NAT) entry, so entries are encoded and decoded here:
// the tuples, the status, the TCP state, the timeout and the zone; the entries Sluice writes
// track TCP windows liberally, as conntrackd's.
package ctnetlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/nlattr"
)

// Status bits of an entry (IPS_* of linux/netfilter/nf_conntrack_common.h).
const (
	StatusSeenReply = 1 << 1
	StatusAssured   = 1 << 2
	// statusConfirmed (IPS_CONFIRMED) is set on an entry ctnetlink creates before it reads the
	// status asked for, which must keep it.
	statusConfirmed = 1 << 3
)

// Attributes of an entry that the netlink library does not name.
const (
	ctaNATSrc       = 6
	ctaZone         = 18
	ctaNATDst       = 13
	ctaNATV4MinIP   = 1
	ctaNATV4MaxIP   = 2
	ctaNATProto     = 3
	ctaNATV6MinIP   = 4
	ctaNATV6MaxIP   = 5
	ctaProtoNATMin  = 1
	ctaProtoNATMax  = 2
	nestedAttribute = unix.NLA_F_NESTED
	// CTA_PROTOINFO_TCP_FLAGS_ORIGINAL and _REPLY: a struct nf_ct_tcp_flags (flags, mask).
	ctaProtoinfoTCPFlagsOriginal = 4
	ctaProtoinfoTCPFlagsReply    = 5
)

// TCP tracking flags of a direction (IP_CT_TCP_FLAG_* of linux/netfilter/nf_conntrack_tcp.h).
const (
	tcpFlagSACKPerm  = 0x02
	tcpFlagCloseInit = 0x04
	tcpFlagBeLiberal = 0x08
)

// Tuple is one direction of an entry.
type Tuple struct {
	Proto    uint8
	Src, Dst netip.AddrPort
}

// Entry is a conntrack entry as Sluice reads it.
type Entry struct {
	// Orig is the direction of the flow's first packet; Reply the answers' (their source is the
	// backend a translated flow was sent to, their destination the translated source).
	Orig, Reply Tuple
	// TCPState is the TCP state (nl.TCP_CONNTRACK_*); 0 for other protocols.
	TCPState uint8
	Status   uint32
	// Timeout is the seconds until the entry expires.
	Timeout uint32
	Zone    uint16
	// Attrs are the entry's attributes as the kernel sent them, which name it for deletion.
	Attrs []byte
}

// SeenReply tells whether a reply was seen (IPS_SEEN_REPLY).
func (e Entry) SeenReply() bool { return e.Status&StatusSeenReply != 0 }

// Family is the address family of one IP version's entries: unix.AF_INET or AF_INET6.
func Family(addr netip.Addr) uint8 {
	if addr.Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// ErrExists is what Create returns for an entry the table has already (by either tuple).
var ErrExists = errors.New("the conntrack table has the entry already")

// Socket is a ctnetlink socket of one network namespace; it serves one request at a time.
type Socket struct {
	s *nl.NetlinkSocket
}

// Open opens a socket in ns (netns.None(): the calling thread's namespace).
func Open(ns netns.NsHandle) (*Socket, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening a ctnetlink socket: %w", err)
	}
	return &Socket{s: s}, nil
}

// Close closes the socket.
func (s *Socket) Close() { s.s.Close() }

// Dump calls fn with each entry of one address family until fn returns false. An interrupted
// dump (the table changed meanwhile) ends with what it read: entries may be missed, none twice.
func (s *Socket) Dump(family uint8, fn func(Entry) bool) error {
	req := request(nl.IPCTNL_MSG_CT_GET, unix.NLM_F_DUMP, family, nil)
	more := true
	err := s.exchange(req, func(m syscall.NetlinkMessage) {
		if !more {
			return
		}
		if e, ok := Parse(m.Data); ok {
			more = fn(e)
		}
	})
	if errors.Is(err, nl.ErrDumpInterrupted) {
		return nil
	}
	return err
}

// Get reads the entry whose original direction is orig; found is false when there is none.
func (s *Socket) Get(orig Tuple) (e Entry, found bool, err error) {
	req := request(nl.IPCTNL_MSG_CT_GET, unix.NLM_F_ACK, Family(orig.Dst.Addr()), tupleAttr(nl.CTA_TUPLE_ORIG, orig).Serialize())
	err = s.exchange(req, func(m syscall.NetlinkMessage) {
		if got, ok := Parse(m.Data); ok {
			e, found = got, true
		}
	})
	if errors.Is(err, unix.ENOENT) {
		return Entry{}, false, nil
	}
	return e, found && err == nil, err
}

// Delete deletes the entry e names (by its Attrs); deleted is false when it was gone already.
func (s *Socket) Delete(family uint8, e Entry) (deleted bool, err error) {
	err = s.exchange(request(nl.IPCTNL_MSG_CT_DELETE, unix.NLM_F_ACK, family, e.Attrs), nil)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

// Create writes e into the table unless it has an entry by either of e's tuples (ErrExists).
// An Orig destination other than the Reply source is written as a destination translation to
// it, a Reply destination other than the Orig source as a source translation, as the packet
// path's NAT would have set them up: packets of the entry are translated. Attrs is not used.
func (s *Socket) Create(e Entry) error {
	family := Family(e.Orig.Src.Addr())
	b := tupleAttr(nl.CTA_TUPLE_ORIG, e.Orig).Serialize()
	// The reply direction is given untranslated: the translations make it what e.Reply says
	// (given translated, the kernel would find nothing to translate, and set no NAT status).
	untranslated := Tuple{Proto: e.Orig.Proto, Src: e.Orig.Dst, Dst: e.Orig.Src}
	b = append(b, tupleAttr(nl.CTA_TUPLE_REPLY, untranslated).Serialize()...)
	if e.Reply.Src != e.Orig.Dst {
		b = append(b, natAttr(ctaNATDst, e.Reply.Src).Serialize()...)
	}
	if e.Reply.Dst != e.Orig.Src {
		b = append(b, natAttr(ctaNATSrc, e.Reply.Dst).Serialize()...)
	}
	b = append(b, nl.NewRtAttr(nl.CTA_STATUS, nl.BEUint32Attr(e.Status|statusConfirmed)).Serialize()...)
	b = append(b, nl.NewRtAttr(nl.CTA_TIMEOUT, nl.BEUint32Attr(e.Timeout)).Serialize()...)
	if e.Zone != 0 {
		b = append(b, nl.NewRtAttr(ctaZone, nl.BEUint16Attr(e.Zone)).Serialize()...)
	}
	if e.Orig.Proto == unix.IPPROTO_TCP {
		b = append(b, tcpInfo(e.TCPState).Serialize()...)
	}
	err := s.exchange(request(nl.IPCTNL_MSG_CT_NEW, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK, family, b), nil)
	if errors.Is(err, unix.EEXIST) {
		return ErrExists
	}
	return err
}

// Refresh gives the TCP entry whose original direction is e.Orig e's state and timeout, and
// tracks its windows liberally from now on, as Create does: the entry's translations stay. It
// is for an entry whose copy on another node saw packets since this one did, so that its
// sequence numbers moved past this entry's windows. ErrNotFound: the entry is gone.
func (s *Socket) Refresh(e Entry) error {
	b := tupleAttr(nl.CTA_TUPLE_ORIG, e.Orig).Serialize()
	b = append(b, nl.NewRtAttr(nl.CTA_TIMEOUT, nl.BEUint32Attr(e.Timeout)).Serialize()...)
	b = append(b, tcpInfo(e.TCPState).Serialize()...)
	err := s.exchange(request(nl.IPCTNL_MSG_CT_NEW, unix.NLM_F_ACK, Family(e.Orig.Dst.Addr()), b), nil)
	if errors.Is(err, unix.ENOENT) {
		return ErrNotFound
	}
	return err
}

// ErrNotFound is what Refresh returns for an entry the table does not have.
var ErrNotFound = errors.New("the conntrack table has no such entry")

// tcpInfo is the TCP protocol information Sluice writes: the state, and in both directions a
// liberal window tracking, which picks the windows up from the next packets instead of judging
// them by a history this node did not see (a copy's sequence numbers are its peer's), as
// conntrackd and the conntrack tool set it on the entries they write.
func tcpInfo(state uint8) *nl.RtAttr {
	flags := uint8(tcpFlagBeLiberal | tcpFlagSACKPerm)
	if state >= nl.TCP_CONNTRACK_TIME_WAIT {
		flags |= tcpFlagCloseInit // a new connection may reopen the tuple at once (RFC 1122)
	}
	info := nl.NewRtAttr(nl.CTA_PROTOINFO|nestedAttribute, nil)
	tcp := info.AddRtAttr(nl.CTA_PROTOINFO_TCP|nestedAttribute, nil)
	tcp.AddRtAttr(nl.CTA_PROTOINFO_TCP_STATE, nl.Uint8Attr(state))
	for _, dir := range []int{ctaProtoinfoTCPFlagsOriginal, ctaProtoinfoTCPFlagsReply} {
		tcp.AddRtAttr(dir, []byte{flags, flags}) // struct nf_ct_tcp_flags: the flags, the mask
	}
	return info
}

func tupleAttr(kind int, t Tuple) *nl.RtAttr {
	a := nl.NewRtAttr(kind|nestedAttribute, nil)
	ip := a.AddRtAttr(nl.CTA_TUPLE_IP|nestedAttribute, nil)
	if t.Src.Addr().Unmap().Is4() {
		ip.AddRtAttr(nl.CTA_IP_V4_SRC, t.Src.Addr().Unmap().AsSlice())
		ip.AddRtAttr(nl.CTA_IP_V4_DST, t.Dst.Addr().Unmap().AsSlice())
	} else {
		ip.AddRtAttr(nl.CTA_IP_V6_SRC, t.Src.Addr().AsSlice())
		ip.AddRtAttr(nl.CTA_IP_V6_DST, t.Dst.Addr().AsSlice())
	}
	proto := a.AddRtAttr(nl.CTA_TUPLE_PROTO|nestedAttribute, nil)
	proto.AddRtAttr(nl.CTA_PROTO_NUM, nl.Uint8Attr(t.Proto))
	proto.AddRtAttr(nl.CTA_PROTO_SRC_PORT, nl.BEUint16Attr(t.Src.Port()))
	proto.AddRtAttr(nl.CTA_PROTO_DST_PORT, nl.BEUint16Attr(t.Dst.Port()))
	return a
}

// natAttr is a translation to exactly to (one address, one port).
func natAttr(kind int, to netip.AddrPort) *nl.RtAttr {
	a := nl.NewRtAttr(kind|nestedAttribute, nil)
	if to.Addr().Unmap().Is4() {
		a.AddRtAttr(ctaNATV4MinIP, to.Addr().Unmap().AsSlice())
		a.AddRtAttr(ctaNATV4MaxIP, to.Addr().Unmap().AsSlice())
	} else {
		a.AddRtAttr(ctaNATV6MinIP, to.Addr().AsSlice())
		a.AddRtAttr(ctaNATV6MaxIP, to.Addr().AsSlice())
	}
	ports := a.AddRtAttr(ctaNATProto|nestedAttribute, nil)
	ports.AddRtAttr(ctaProtoNATMin, nl.BEUint16Attr(to.Port()))
	ports.AddRtAttr(ctaProtoNATMax, nl.BEUint16Attr(to.Port()))
	return a
}

// exchange sends req and reads its answers until the last, calling fn (if set) with each
// message that is not the end or an acknowledgement; an error answer is returned as its errno.
// A dump the kernel marked interrupted returns nl.ErrDumpInterrupted once it is read whole.
func (s *Socket) exchange(req *nl.NetlinkRequest, fn func(syscall.NetlinkMessage)) error {
	if err := s.s.Send(req); err != nil {
		return err
	}
	pid, err := s.s.GetPid()
	if err != nil {
		return err
	}
	var interrupted bool
	for {
		msgs, from, err := s.s.Receive()
		if err != nil {
			return err
		}
		if from.Pid != 0 {
			continue // not from the kernel
		}
		for _, m := range msgs {
			if m.Header.Seq != req.Seq || m.Header.Pid != pid {
				continue // an answer to an earlier request, abandoned
			}
			interrupted = interrupted || m.Header.Flags&unix.NLM_F_DUMP_INTR != 0
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				if interrupted {
					return nl.ErrDumpInterrupted
				}
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return errors.New("ctnetlink: a short error answer")
				}
				if errno := -int32(nl.NativeEndian().Uint32(m.Data[:4])); errno != 0 {
					return syscall.Errno(errno)
				}
				return nil // the acknowledgement
			}
			if fn != nil {
				fn(m)
			}
			if m.Header.Flags&unix.NLM_F_MULTI == 0 {
				return nil
			}
		}
	}
}

// request is a ctnetlink request of msg (nl.IPCTNL_MSG_CT_*) for family, with attrs.
func request(msg, flags int, family uint8, attrs []byte) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|msg, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: unix.NFNETLINK_V0})
	if attrs != nil {
		req.AddRawData(attrs)
	}
	return req
}

// Parse decodes an IPCTNL_MSG_CT_NEW message (of a dump, an event or a get) from its nfgenmsg
// on; ok is false for one without both tuples.
func Parse(msg []byte) (e Entry, ok bool) {
	if len(msg) < nl.SizeofNfgenmsg {
		return Entry{}, false
	}
	e.Attrs = msg[nl.SizeofNfgenmsg:]
	attrs, err := nlattr.Parse(e.Attrs)
	if err != nil {
		return Entry{}, false
	}
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case nl.CTA_TUPLE_ORIG:
			e.Orig = parseTuple(a.Value)
		case nl.CTA_TUPLE_REPLY:
			e.Reply = parseTuple(a.Value)
		case nl.CTA_TIMEOUT:
			e.Timeout = be32(a.Value)
		case nl.CTA_STATUS:
			e.Status = be32(a.Value)
		case ctaZone:
			e.Zone = be16(a.Value)
		case nl.CTA_PROTOINFO:
			e.TCPState = parseTCPState(a.Value)
		}
	}
	return e, e.Orig.Dst.IsValid() && e.Reply.Src.IsValid()
}

func parseTuple(b []byte) Tuple {
	var t Tuple
	var src, dst netip.Addr
	var sport, dport uint16
	for _, a := range nlattr.Nested(b) {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case nl.CTA_TUPLE_IP:
			for _, ip := range nlattr.Nested(a.Value) {
				addr, _ := netip.AddrFromSlice(ip.Value)
				switch ip.Attr.Type & nl.NLA_TYPE_MASK {
				case nl.CTA_IP_V4_SRC, nl.CTA_IP_V6_SRC:
					src = addr
				case nl.CTA_IP_V4_DST, nl.CTA_IP_V6_DST:
					dst = addr
				}
			}
		case nl.CTA_TUPLE_PROTO:
			for _, p := range nlattr.Nested(a.Value) {
				switch p.Attr.Type & nl.NLA_TYPE_MASK {
				case nl.CTA_PROTO_NUM:
					if len(p.Value) == 1 {
						t.Proto = p.Value[0]
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
		t.Src = netip.AddrPortFrom(src.Unmap(), sport)
	}
	if dst.IsValid() {
		t.Dst = netip.AddrPortFrom(dst.Unmap(), dport)
	}
	return t
}

// parseTCPState reads the TCP state of an entry's CTA_PROTOINFO; 0 when it holds none.
func parseTCPState(b []byte) uint8 {
	for _, a := range nlattr.Nested(b) {
		if a.Attr.Type&nl.NLA_TYPE_MASK != nl.CTA_PROTOINFO_TCP {
			continue
		}
		for _, s := range nlattr.Nested(a.Value) {
			if s.Attr.Type&nl.NLA_TYPE_MASK == nl.CTA_PROTOINFO_TCP_STATE && len(s.Value) == 1 {
				return s.Value[0]
			}
		}
	}
	return 0
}

func be16(b []byte) uint16 {
	if len(b) != 2 {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

func be32(b []byte) uint32 {
	if len(b) != 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}
