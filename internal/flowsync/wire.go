package flowsync

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"math"
	"net/netip"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
)

// msgType is a datagram's type.
type msgType uint8

// The message types.
const (
	msgUpdates       msgType = 1
	msgResyncRequest msgType = 2
	msgResyncData    msgType = 3
	msgResyncEnd     msgType = 4
	msgHeartbeat     msgType = 5
	// msgRefresh carries a node's active flows again, every Options.RefreshInterval, so that
	// its peers' copies keep a fresh idle time; added to version 1 (older receivers drop it).
	msgRefresh msgType = 6
	// lastType is the highest type a receiver takes in.
	lastType = msgRefresh
)

// Sizes and bounds of the wire format.
const (
	magic        = "SLFS"
	version      = 1
	headerSize   = 32
	macSize      = sha256.Size
	refSize      = 16
	totalSize    = 8
	recordHead   = 8
	record4Size  = recordHead + 4*(4+2)
	record6Size  = recordHead + 4*(16+2)
	minDatagram  = headerSize + macSize
	maxDatagram  = 65507 // the largest UDP payload over IPv4
	minMTU       = headerSize + refSize + record6Size + macSize
	maxRecords   = (maxDatagram - minDatagram) / record4Size
	flagClosing  = 1 << 0
	flagNATSrc   = 1 << 1
	knownFlags   = flagClosing | flagNATSrc
	protoTCP     = 6
	protoUDP     = 17
	familyIPv4   = 4
	familyIPv6   = 6
	maxIdleMilli = math.MaxUint32
	// maxTCPState is the highest conntrack TCP state a record carries (TCP_CONNTRACK_SYN_SENT2).
	maxTCPState = 10
)

// familyMixed is the family of a record of a tunnel's flow across families (6in4, 4in6):
// IPv6-sized, its IPv4 addresses mapped; added to version 1, in datagrams of their own (older
// receivers drop those whole).
const familyMixed = 46

// DropReason says why a received datagram was dropped.
type DropReason string

// The drop reasons.
const (
	DropBadLength   DropReason = "bad_length"
	DropBadMagic    DropReason = "bad_magic"
	DropBadVersion  DropReason = "bad_version"
	DropBadMAC      DropReason = "bad_mac"
	DropUnknownPeer DropReason = "unknown_peer"
	DropReplay      DropReason = "replay"
	DropDecodeError DropReason = "decode_error"
	DropFromSelf    DropReason = "from_self"
)

// DropReasons lists every DropReason, for collectors that export each one from the start.
var DropReasons = []DropReason{DropBadLength, DropBadMagic, DropBadVersion, DropBadMAC,
	DropUnknownPeer, DropReplay, DropDecodeError, DropFromSelf}

// errUnencodable: a flow the wire format cannot carry (mixed families, an unknown protocol, no
// client, listener or backend).
var errUnencodable = errors.New("flow not encodable")

// resyncRef names a resync request: the requester's node id and the request's sequence number.
type resyncRef struct {
	node, seq uint64
}

// message is a decoded datagram.
type message struct {
	kind  msgType
	node  uint64
	seq   uint64
	time  int64
	ref   resyncRef
	total uint64
	flows []datapath.ReplicatedFlow
}

// hasRef tells whether messages of type t carry a resync reference.
func (t msgType) hasRef() bool { return t == msgResyncData || t == msgResyncEnd }

// hasRecords tells whether messages of type t carry flow records.
func (t msgType) hasRecords() bool {
	return t == msgUpdates || t == msgResyncData || t == msgRefresh
}

// newMAC returns the HMAC-SHA256 of secret; one per goroutine, since it keeps state.
func newMAC(secret []byte) hash.Hash { return hmac.New(sha256.New, secret) }

// encoder builds datagrams of at most mtu bytes in a buffer it reuses.
type encoder struct {
	buf   []byte
	mtu   int
	count int
	kind  msgType
	ref   resyncRef
	mixed bool // the datagram holds mixed-family records, and only those
}

func newEncoder(mtu int) *encoder {
	return &encoder{buf: make([]byte, 0, mtu), mtu: mtu}
}

// reset starts a datagram of type kind (with ref, for resync data and end).
func (e *encoder) reset(kind msgType, ref resyncRef) {
	e.kind, e.ref, e.count, e.mixed = kind, ref, 0, false
	e.buf = append(e.buf[:0], magic...)
	e.buf = append(e.buf, version, byte(kind))
	e.buf = append(e.buf, make([]byte, headerSize-len(magic)-2)...)
	if kind.hasRef() {
		e.buf = binary.BigEndian.AppendUint64(e.buf, ref.node)
		e.buf = binary.BigEndian.AppendUint64(e.buf, ref.seq)
	}
}

// empty tells whether the datagram holds no records.
func (e *encoder) empty() bool { return e.count == 0 }

// add appends f's record; it returns false when the datagram has no room left for it (or holds
// records of the other kind: mixed-family records go in datagrams of their own, so that a receiver
// of an older version drops only those), and errUnencodable for a flow the format cannot carry.
func (e *encoder) add(f *datapath.ReplicatedFlow) (bool, error) {
	family, size, err := recordFamily(f)
	if err != nil {
		return false, err
	}
	mixed := family == familyMixed
	if len(e.buf)+size+macSize > e.mtu || (e.count > 0 && mixed != e.mixed) {
		return false, nil
	}
	e.buf = appendRecord(e.buf, f, family)
	e.count++
	e.mixed = mixed
	return true, nil
}

// setTotal writes the total of a resync-end.
func (e *encoder) setTotal(total uint64) {
	e.buf = binary.BigEndian.AppendUint64(e.buf, total)
}

// seal fills in the header and appends the HMAC; the datagram is valid until the next reset.
func (e *encoder) seal(mac hash.Hash, node, seq uint64, now time.Time) []byte {
	binary.BigEndian.PutUint16(e.buf[6:], uint16(e.count))
	binary.BigEndian.PutUint64(e.buf[8:], node)
	binary.BigEndian.PutUint64(e.buf[16:], seq)
	binary.BigEndian.PutUint64(e.buf[24:], uint64(now.UnixNano()))
	mac.Reset()
	mac.Write(e.buf)
	e.buf = mac.Sum(e.buf)
	return e.buf
}

// recordFamily checks that f can be encoded and returns its family and record size: the client's,
// or familyMixed when its backend is of the other family (a tunnel's 6in4 or 4in6 flow).
func recordFamily(f *datapath.ReplicatedFlow) (byte, int, error) {
	c, l, b := f.Client.Addr().Unmap(), f.Listener.Addr().Unmap(), f.Backend.Addr().Unmap()
	if !c.IsValid() || c.IsUnspecified() || protoNumber(f.Protocol) == 0 {
		return 0, 0, errUnencodable
	}
	if !l.IsValid() || l.IsUnspecified() || l.Is4() != c.Is4() || !b.IsValid() || b.IsUnspecified() {
		return 0, 0, errUnencodable
	}
	n := f.NATSource.Addr().Unmap()
	if (n.IsValid() && (n.IsUnspecified() || n.Is4() != b.Is4())) || (!n.IsValid() && f.NATSource.Port() != 0) {
		return 0, 0, errUnencodable
	}
	switch {
	case b.Is4() != c.Is4():
		return familyMixed, record6Size, nil
	case c.Is4():
		return familyIPv4, record4Size, nil
	default:
		return familyIPv6, record6Size, nil
	}
}

func protoNumber(p config.Protocol) byte {
	switch p.OrDefault() {
	case config.ProtocolTCP:
		return protoTCP
	case config.ProtocolUDP:
		return protoUDP
	default:
		return 0
	}
}

// appendRecord appends f's record of family (checked by recordFamily).
func appendRecord(b []byte, f *datapath.ReplicatedFlow, family byte) []byte {
	var flags byte
	if f.Closing {
		flags |= flagClosing
	}
	if f.NATSource.Addr().IsValid() {
		flags |= flagNATSrc
	}
	b = append(b, family, protoNumber(f.Protocol), flags, f.TCPState)
	b = binary.BigEndian.AppendUint32(b, idleMilli(f.Idle))
	for _, ap := range []netip.AddrPort{f.Client, f.Listener, f.Backend, f.NATSource} {
		b = appendAddrPort(b, ap, family)
	}
	return b
}

func idleMilli(d time.Duration) uint32 {
	switch ms := d.Milliseconds(); {
	case ms <= 0:
		return 0
	case ms >= maxIdleMilli:
		return maxIdleMilli
	default:
		return uint32(ms)
	}
}

// appendAddrPort appends ap's address in family's size (zero for an unset one) and its port.
func appendAddrPort(b []byte, ap netip.AddrPort, family byte) []byte {
	a := ap.Addr().Unmap()
	if family == familyIPv4 {
		var raw [4]byte
		if a.IsValid() {
			raw = a.As4()
		}
		b = append(b, raw[:]...)
	} else {
		var raw [16]byte
		if a.IsValid() {
			raw = a.As16()
		}
		b = append(b, raw[:]...)
	}
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

// decoder checks and decodes received datagrams; flows is sized for the largest datagram once,
// and reused: the flows of a message are valid until the next open.
type decoder struct {
	mac   hash.Hash
	sum   [macSize]byte
	flows []datapath.ReplicatedFlow
}

func newDecoder(secret []byte) *decoder {
	return &decoder{mac: newMAC(secret), flows: make([]datapath.ReplicatedFlow, 0, maxRecords)}
}

// open checks b (length, magic, version, HMAC) and decodes it; a non-empty reason says why it
// is dropped.
func (d *decoder) open(b []byte) (message, DropReason) {
	switch {
	case len(b) < minDatagram || len(b) > maxDatagram:
		return message{}, DropBadLength
	case string(b[:len(magic)]) != magic:
		return message{}, DropBadMagic
	case b[4] != version:
		return message{}, DropBadVersion
	}
	body := b[:len(b)-macSize]
	d.mac.Reset()
	d.mac.Write(body)
	if !hmac.Equal(d.mac.Sum(d.sum[:0]), b[len(body):]) {
		return message{}, DropBadMAC
	}
	m, ok := d.decode(body)
	if !ok {
		return message{}, DropDecodeError
	}
	return m, ""
}

// decode decodes an authenticated datagram without its HMAC.
func (d *decoder) decode(b []byte) (message, bool) {
	m := message{
		kind: msgType(b[5]),
		node: binary.BigEndian.Uint64(b[8:]),
		seq:  binary.BigEndian.Uint64(b[16:]),
		time: int64(binary.BigEndian.Uint64(b[24:])),
	}
	count := int(binary.BigEndian.Uint16(b[6:]))
	if m.kind < msgUpdates || m.kind > lastType || m.seq == 0 || (count > 0 && !m.kind.hasRecords()) {
		return message{}, false
	}
	rest := b[headerSize:]
	if m.kind.hasRef() {
		if len(rest) < refSize {
			return message{}, false
		}
		m.ref = resyncRef{binary.BigEndian.Uint64(rest), binary.BigEndian.Uint64(rest[8:])}
		rest = rest[refSize:]
	}
	if m.kind == msgResyncEnd {
		if len(rest) != totalSize {
			return message{}, false
		}
		m.total = binary.BigEndian.Uint64(rest)
		return m, true
	}
	flows, rest, ok := d.records(rest, count)
	if !ok || len(rest) != 0 {
		return message{}, false
	}
	m.flows = flows
	return m, true
}

// records decodes count records from the head of b into d.flows, never growing it.
func (d *decoder) records(b []byte, count int) ([]datapath.ReplicatedFlow, []byte, bool) {
	if count > cap(d.flows) {
		return nil, nil, false
	}
	flows := d.flows[:0]
	for range count {
		f, n, ok := decodeRecord(b)
		if !ok {
			return nil, nil, false
		}
		flows = append(flows, f)
		b = b[n:]
	}
	return flows, b, true
}

// decodeRecord decodes the record at the head of b and returns its size.
func decodeRecord(b []byte) (datapath.ReplicatedFlow, int, bool) {
	var f datapath.ReplicatedFlow
	if len(b) < recordHead {
		return f, 0, false
	}
	size, addrLen := record4Size, 4
	switch b[0] {
	case familyIPv4:
	case familyIPv6, familyMixed:
		size, addrLen = record6Size, 16
	default:
		return f, 0, false
	}
	switch b[1] {
	case protoTCP:
		f.Protocol = config.ProtocolTCP
	case protoUDP:
		f.Protocol = config.ProtocolUDP
	default:
		return f, 0, false
	}
	flags := b[2]
	if len(b) < size || flags&^knownFlags != 0 || b[3] > maxTCPState || (b[3] != 0 && f.Protocol != config.ProtocolTCP) {
		return f, 0, false
	}
	f.TCPState = b[3]
	f.Closing = flags&flagClosing != 0
	f.Idle = time.Duration(binary.BigEndian.Uint32(b[4:])) * time.Millisecond
	var aps [4]netip.AddrPort
	for i := range aps {
		off := recordHead + i*(addrLen+2)
		a, _ := netip.AddrFromSlice(b[off : off+addrLen])
		if a.Is4In6() && (b[0] != familyMixed || a.Unmap().IsUnspecified()) { // mapped: IPv4 of a mixed record
			return f, 0, false
		}
		a = a.Unmap()
		aps[i] = netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[off+addrLen:]))
		if a.IsUnspecified() && i < 3 {
			return f, 0, false
		}
	}
	f.Client, f.Listener, f.Backend = aps[0], aps[1], aps[2]
	switch nat := aps[3]; {
	case flags&flagNATSrc != 0 && !nat.Addr().IsUnspecified():
		f.NATSource = nat
	case flags&flagNATSrc != 0 || nat.Port() != 0 || !nat.Addr().IsUnspecified():
		return f, 0, false
	}
	if family, _, err := recordFamily(&f); err != nil || family != b[0] {
		return f, 0, false // families that do not fit the record's: each flow has one encoding
	}
	return f, size, true
}
