package flowsync

import (
	"context"
	"maps"
	"net/netip"
	"time"
)

// Bounds of the peers.
const (
	// missedHeartbeats is how many heartbeat intervals without a datagram make a peer down, and
	// a resync whose data stalled be asked again.
	missedHeartbeats = 3
	// maxResyncAttempts is how many times a resync is asked of a peer before the node gives up
	// until the peer comes up again.
	maxResyncAttempts = 3
	// maxGroupPeers bounds the senders a group member keeps track of.
	maxGroupPeers = 64
	// replayWindow is how many sequence numbers below the highest seen are still taken in.
	replayWindow = 64
)

// window is the replay window of one sender node id: the highest sequence number seen and a bit
// for each of the replayWindow below it (bit 0: the highest).
type window struct {
	node uint64
	max  uint64
	seen uint64
}

// accept tells whether seq is new, and marks it seen.
func (w *window) accept(seq uint64) bool {
	switch {
	case seq > w.max:
		shift := seq - w.max
		if shift >= replayWindow {
			w.seen = 0
		} else {
			w.seen <<= shift
		}
		w.seen |= 1
		w.max = seq
		return true
	case w.max-seq >= replayWindow:
		return false
	}
	bit := uint64(1) << (w.max - seq)
	if w.seen&bit != 0 {
		return false
	}
	w.seen |= bit
	return true
}

// skipBeforeLapse counts the records of a resync asked since a time (a restarted peer, or a
// pause) that the peer saw no packet of since then (Options.ResyncOnce).
const skipBeforeLapse = "idle since before the lapse"

// request is a resync this node asked of a peer.
type request struct {
	ref      resyncRef
	started  time.Time
	progress time.Time
	received uint64
	attempts int
	// maxIdle, when not zero, is the longest idle time of the records taken in: a resync asked
	// since a time (peer.askSince) takes only the flows the peer saw a packet of since.
	maxIdle time.Duration
	// recent counts the records within maxIdle.
	recent uint64
}

// peer is what a node knows of another.
type peer struct {
	addr      netip.Addr
	win       window
	lastClock int64 // the latest sender clock seen from the address, whatever its node id
	lastSeen  time.Time
	connected bool
	// whole: a full resync from it completed since it came up, so that its flows up to shortly
	// before lastSeen are all here (see horizon).
	whole  bool
	status PeerStatus
	asked  *request
	// everAsked: this node asked it for a full resync since it started (Options.ResyncOnce).
	everAsked bool
	// askSince, when not zero, is asked for (once) the flows it saw a packet of since then
	// (Options.ResyncOnce): it restarted (the last time its previous node id was heard), or this
	// node's table missed its changes since then (Pause).
	askSince time.Time
	// serving cancels the resync this node sends the peer, if any; serial tells which one.
	serving context.CancelFunc
	serial  uint64
}

func newPeer(addr netip.Addr) *peer {
	return &peer{addr: addr, status: PeerStatus{Address: addr, Drops: map[DropReason]uint64{}, Skipped: map[string]uint64{}}}
}

// admit checks a datagram's node id, sequence number and clock against the replay window; it
// tells whether the sender is a new node id (a restart, or first heard).
func (p *peer) admit(m *message) (newNode, ok bool) {
	if m.node != p.win.node {
		// A node id that replaces another must be newer than any datagram of the old one, so
		// that a replay of the old one's datagrams cannot pass for a restart.
		if p.win.node != 0 && m.time <= p.lastClock {
			return false, false
		}
		p.win = window{node: m.node}
		newNode = true
	}
	if !p.win.accept(m.seq) {
		return false, false
	}
	p.lastClock = max(p.lastClock, m.time)
	return newNode, true
}

// snapshot is the peer's status at now.
func (p *peer) snapshot() PeerStatus {
	s := p.status
	s.NodeID = p.win.node
	s.Connected = p.connected
	s.LastSeen = p.lastSeen
	s.Drops = maps.Clone(p.status.Drops)
	s.Skipped = maps.Clone(p.status.Skipped)
	return s
}
