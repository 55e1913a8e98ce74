// Package cttable offers the kernel's conntrack table to flowsync as a datapath.FlowReplicator,
// for the full resync a node asks of its peers when it starts: each peer sends its live table,
// and the node writes in the entries it does not track itself (and refreshes those of its own
// that a peer served since). conntrackd (internal/conntrackd) replicates the table's live
// changes; its own full resync (conntrackd -n) answers from a cache that keeps flows that have
// ended, and writes a peer's established copy over a connection this node is closing, which this
// replaces.
//
// A record carries an entry's tuples, its TCP state and its idle time: the timeout of its state
// on the sending node less the time it has left. The receiving node gives it the timeout of the
// state on its own less that idle time (one that has none left is not written), so that nodes
// whose timeouts differ each apply their own, and an entry under a service's timeout policy
// keeps what it had left. Written entries are seen replied and assured, with the translations
// their tuples tell (the packet path's own, which they replace).
package cttable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/ctnetlink"
	"github.com/sluicelb/sluice/internal/datapath"
)

// Reasons ImportFlows skips a record for.
const (
	// SkipTracked: this node tracks the flow already (by either direction): its own entry is
	// newer than any copy.
	SkipTracked = "tracked here"
	// SkipExpired: the record's idle time is past this node's timeout for its state.
	SkipExpired = "expired"
	// SkipNotConntrack: the record is not of a conntrack entry (a TCP flow without a state).
	SkipNotConntrack = "not a conntrack entry"
	// SkipRefused: the kernel refused the entry (a full table, a translation it cannot set up).
	SkipRefused = "refused by the kernel"
)

// Table is the conntrack table of one network namespace.
type Table struct {
	ns       netns.NsHandle
	ignore   map[netip.Addr]bool
	timeouts timeouts
}

// New returns the conntrack table of the calling thread's network namespace, whose entries
// with an address in ignore (the sync link's: this node's and its peers') or on loopback are
// neither sent nor written, as conntrackd's filter leaves them out. Close releases it.
func New(ignore []netip.Addr) (*Table, error) {
	t, err := readTimeouts()
	if err != nil {
		return nil, err
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("reading the network namespace: %w", err)
	}
	tb := &Table{ns: ns, ignore: map[netip.Addr]bool{}, timeouts: t}
	for _, a := range ignore {
		tb.ignore[a.Unmap()] = true
	}
	return tb, nil
}

// Close releases the namespace's handle.
func (t *Table) Close() error { return t.ns.Close() }

// WatchFlows emits nothing: conntrackd sends the table's live changes.
func (t *Table) WatchFlows(context.Context, func([]datapath.ReplicatedFlow)) error { return nil }

// LostFlows is 0: conntrackd counts its own lost events (sluice sync).
func (t *Table) LostFlows(context.Context) (uint64, error) { return 0, nil }

// ReplicatedUntil does nothing: the nft datapath keeps no second chance to end.
func (t *Table) ReplicatedUntil(context.Context, time.Time) error { return nil }

// SnapshotFlows calls fn with every entry a peer can take over: TCP connections from
// established to closed, and assured datagram flows, of both families, until fn returns false.
func (t *Table) SnapshotFlows(ctx context.Context, fn func(datapath.ReplicatedFlow) bool) error {
	s, err := ctnetlink.Open(t.ns)
	if err != nil {
		return err
	}
	defer s.Close()
	more := true
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		err := s.Dump(family, func(e ctnetlink.Entry) bool {
			if f, ok := t.record(e); ok {
				more = ctx.Err() == nil && fn(f)
			}
			return more
		})
		if err != nil {
			return fmt.Errorf("reading the conntrack table: %w", err)
		}
		if !more {
			break
		}
	}
	return ctx.Err()
}

// record is e as a peer takes it in; ok is false for an entry that is not sent.
func (t *Table) record(e ctnetlink.Entry) (datapath.ReplicatedFlow, bool) {
	f := datapath.ReplicatedFlow{Client: e.Orig.Src, Listener: e.Orig.Dst, Backend: e.Reply.Src, TCPState: e.TCPState}
	switch {
	case e.Zone != 0 || t.ignored(e):
		return f, false
	case e.Orig.Proto == unix.IPPROTO_TCP:
		if e.TCPState < nl.TCP_CONNTRACK_ESTABLISHED || e.TCPState > nl.TCP_CONNTRACK_CLOSE {
			return f, false // a handshake starts again with the client's next SYN
		}
		f.Protocol, f.Closing = config.ProtocolTCP, e.TCPState > nl.TCP_CONNTRACK_ESTABLISHED
	case e.Orig.Proto == unix.IPPROTO_UDP:
		if e.Status&ctnetlink.StatusAssured == 0 {
			return f, false // unanswered, or a single exchange: nothing to take over
		}
		f.Protocol, f.TCPState = config.ProtocolUDP, 0
	default:
		return f, false
	}
	if e.Reply.Dst != e.Orig.Src {
		f.NATSource = e.Reply.Dst
	}
	f.Idle = max(t.timeouts.of(f)-time.Duration(e.Timeout)*time.Second, 0)
	return f, true
}

// ignored tells whether an entry has an address conntrackd's filter leaves out.
func (t *Table) ignored(e ctnetlink.Entry) bool {
	for _, a := range []netip.Addr{e.Orig.Src.Addr(), e.Orig.Dst.Addr(), e.Reply.Src.Addr(), e.Reply.Dst.Addr()} {
		if a.IsLoopback() || t.ignore[a] {
			return true
		}
	}
	return false
}

// ImportFlows writes the flows this node does not track into its conntrack table, and refreshes
// those it tracks whose record saw a packet since this node's entry did; the others are skipped
// and counted by reason. The error is the first the kernel answered that is not one of a flow
// tracked here already.
//
// A record more recent than this node's own entry is a connection the peer served while this
// node was down: one that closed there meanwhile would stay ESTABLISHED here, and its sequence
// numbers have moved past the windows this entry last saw (which the kernel judges its packets by
// where window checks are on). The entry takes the record's state and timeout and tracks its
// windows liberally (ctnetlink.Refresh).
func (t *Table) ImportFlows(ctx context.Context, flows []datapath.ReplicatedFlow) (datapath.ImportResult, error) {
	res := datapath.ImportResult{Skipped: map[string]int{}}
	s, err := ctnetlink.Open(t.ns)
	if err != nil {
		return res, err
	}
	defer s.Close()
	var first error
	for i := range flows {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		e, reason := t.entry(&flows[i])
		if reason == "" {
			switch err := s.Create(e); {
			case errors.Is(err, ctnetlink.ErrExists):
				reason, err = t.refresh(s, e, flows[i].Idle)
				if err != nil {
					reason, first = SkipRefused, cmp.Or(first, err)
				}
			case err != nil:
				reason, first = SkipRefused, cmp.Or(first, err)
			}
		}
		if reason != "" {
			res.Skipped[reason]++
			continue
		}
		res.Imported++
	}
	if first != nil {
		return res, fmt.Errorf("writing peers' conntrack entries: %w", first)
	}
	return res, nil
}

// refresh refreshes this node's own entry for e, a TCP record idle for idle on its peer, when
// the record saw a packet at least a second more recently than the entry (both idle times are
// whole seconds of a timeout left, each at most a second over the truth, so a second apart means
// the peer's packet was the later one) and both translate the flow alike; "" when it did, else
// SkipTracked.
func (t *Table) refresh(s *ctnetlink.Socket, e ctnetlink.Entry, idle time.Duration) (string, error) {
	if e.Orig.Proto != unix.IPPROTO_TCP {
		return SkipTracked, nil
	}
	own, found, err := s.Get(e.Orig)
	if err != nil || !found || own.Reply != e.Reply || own.TCPState == 0 {
		return SkipTracked, err
	}
	ownIdle := t.timeouts.of(datapath.ReplicatedFlow{Protocol: config.ProtocolTCP, TCPState: own.TCPState}) - time.Duration(own.Timeout)*time.Second
	if ownIdle-idle < time.Second {
		return SkipTracked, nil
	}
	if err := s.Refresh(e); errors.Is(err, ctnetlink.ErrNotFound) {
		return SkipTracked, nil // it ended meanwhile
	} else if err != nil {
		return "", err
	}
	return "", nil
}

// entry is the conntrack entry of a peer's record f, or why it is not written.
func (t *Table) entry(f *datapath.ReplicatedFlow) (ctnetlink.Entry, string) {
	var proto uint8
	switch {
	case f.Protocol == config.ProtocolTCP && (f.TCPState < nl.TCP_CONNTRACK_ESTABLISHED || f.TCPState > nl.TCP_CONNTRACK_CLOSE):
		return ctnetlink.Entry{}, SkipNotConntrack
	case f.Protocol == config.ProtocolTCP:
		proto = unix.IPPROTO_TCP
	case f.Protocol == config.ProtocolUDP:
		proto = unix.IPPROTO_UDP
	default:
		return ctnetlink.Entry{}, SkipNotConntrack
	}
	left := t.timeouts.of(*f) - f.Idle
	if left < time.Second {
		return ctnetlink.Entry{}, SkipExpired
	}
	replyTo := f.Client
	if f.NATSource.IsValid() {
		replyTo = f.NATSource
	}
	e := ctnetlink.Entry{
		Orig:     ctnetlink.Tuple{Proto: proto, Src: f.Client, Dst: f.Listener},
		Reply:    ctnetlink.Tuple{Proto: proto, Src: f.Backend, Dst: replyTo},
		TCPState: f.TCPState,
		Status:   ctnetlink.StatusSeenReply | ctnetlink.StatusAssured,
		Timeout:  uint32(left / time.Second),
	}
	if t.ignored(e) {
		return ctnetlink.Entry{}, SkipNotConntrack
	}
	return e, ""
}

// timeouts are the namespace's conntrack timeouts: of each TCP state a record carries, and of
// an assured datagram flow.
type timeouts struct {
	tcp [nl.TCP_CONNTRACK_CLOSE + 1]time.Duration
	udp time.Duration
}

// of is the timeout of f's state.
func (t timeouts) of(f datapath.ReplicatedFlow) time.Duration {
	if f.Protocol == config.ProtocolUDP {
		return t.udp
	}
	if int(f.TCPState) < len(t.tcp) {
		return t.tcp[f.TCPState]
	}
	return 0
}

// readTimeouts reads the calling thread's namespace's timeouts from its sysctls.
func readTimeouts() (timeouts, error) {
	var t timeouts
	sysctls := map[*time.Duration]string{
		&t.tcp[nl.TCP_CONNTRACK_ESTABLISHED]: "net.netfilter.nf_conntrack_tcp_timeout_established",
		&t.tcp[nl.TCP_CONNTRACK_FIN_WAIT]:    "net.netfilter.nf_conntrack_tcp_timeout_fin_wait",
		&t.tcp[nl.TCP_CONNTRACK_CLOSE_WAIT]:  "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
		&t.tcp[nl.TCP_CONNTRACK_LAST_ACK]:    "net.netfilter.nf_conntrack_tcp_timeout_last_ack",
		&t.tcp[nl.TCP_CONNTRACK_TIME_WAIT]:   "net.netfilter.nf_conntrack_tcp_timeout_time_wait",
		&t.tcp[nl.TCP_CONNTRACK_CLOSE]:       "net.netfilter.nf_conntrack_tcp_timeout_close",
		&t.udp:                               "net.netfilter.nf_conntrack_udp_timeout_stream",
	}
	for d, name := range sysctls {
		secs, err := datapath.ReadSysctl(name)
		if err != nil {
			return timeouts{}, fmt.Errorf("reading the conntrack timeouts: %w", err)
		}
		*d = time.Duration(secs) * time.Second
	}
	return t, nil
}
