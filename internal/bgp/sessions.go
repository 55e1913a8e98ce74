package bgp

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// sessions follows every configured peer's session from GoBGP's state events: its state and
// since when, how often it went down after being established, and the last error. It turns
// the transitions into Events, delivered in order by one goroutine of its own so that neither
// GoBGP nor a caller of the Speaker ever waits on the notify function.
type sessions struct {
	notify func(Event)

	mu    sync.Mutex
	gen   uint64 // the server generation whose events count; older ones are stale
	peers map[netip.Addr]*session
	queue []Event
	wake  chan struct{} // capacity 1: the queue has events
	quit  chan struct{} // closed by stop
	done  chan struct{} // closed when the delivery goroutine has returned
}

type session struct {
	state     PeerState
	since     time.Time
	flaps     uint64
	lastError string
	// bfdDown is why the BFD session just failed, which GoBGP follows with a reset of the BGP
	// session: the reason of the next state change, the reset.
	bfdDown string
}

func newSessions(notify func(Event)) *sessions {
	s := &sessions{
		notify: notify,
		peers:  map[netip.Addr]*session{},
		wake:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if notify == nil {
		close(s.done)
		return s
	}
	go s.deliver()
	return s
}

// deliver hands queued events to notify, in order, until stop.
func (s *sessions) deliver() {
	defer close(s.done)
	for {
		s.mu.Lock()
		batch := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range batch {
			s.notify(ev)
		}
		select {
		case <-s.wake:
		case <-s.quit:
			return
		}
	}
}

// stop ends delivery; events still queued are dropped.
func (s *sessions) stop() {
	close(s.quit)
	<-s.done
}

// post queues ev for notify; the caller holds s.mu.
func (s *sessions) post(ev Event) {
	if s.notify == nil {
		return
	}
	s.queue = append(s.queue, ev)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// newGeneration makes events of the server generation before it stale. The sessions of
// that server have ended: an established one counts as a flap.
func (s *sessions) newGeneration(reason string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	now := time.Now()
	for addr, p := range s.peers {
		if p.state == StateEstablished {
			p.flaps++
			p.lastError = reason
			s.post(Event{Kind: PeerDown, Peer: addr, State: StateIdle, Reason: reason})
		}
		if p.state != StateIdle {
			p.state, p.since = StateIdle, now
		}
	}
	return s.gen
}

// track starts following addr, if it is not followed yet.
func (s *sessions) track(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peers[addr] == nil {
		s.peers[addr] = &session{state: StateIdle, since: time.Now()}
	}
}

// forget stops following addr: its later events are ignored.
func (s *sessions) forget(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.peers, addr)
}

// observe records that addr's session entered state at t, as server generation gen saw it.
func (s *sessions) observe(gen uint64, addr netip.Addr, state PeerState, reason string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[addr]
	if gen != s.gen || p == nil || p.state == state {
		return
	}
	was := p.state
	p.state, p.since = state, t
	if p.bfdDown != "" && was == StateEstablished {
		reason = p.bfdDown
	}
	p.bfdDown = ""
	if reason != "" {
		p.lastError = reason
	}
	switch {
	case state == StateEstablished:
		s.post(Event{Kind: PeerUp, Peer: addr, State: state})
	case was == StateEstablished:
		p.flaps++
		s.post(Event{Kind: PeerDown, Peer: addr, State: state, Reason: reason})
	}
}

// bfdFailed records that addr's BFD session failed, for why: the reason of the reset of its
// BGP session that GoBGP makes next.
func (s *sessions) bfdFailed(addr netip.Addr, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.peers[addr]; p != nil {
		p.bfdDown = why
	}
}

// connectFailed records why a connection attempt to addr failed, as its last error, while its
// session is not established: a peer that never answers says why. A timeout is what a router
// that drops the connection says too, which is also how a TCP MD5 password it does not share
// shows.
func (s *sessions) connectFailed(addr netip.Addr, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[addr]
	if p == nil || p.state == StateEstablished {
		return
	}
	p.lastError = "connect: " + reason
	if strings.Contains(reason, "i/o timeout") {
		p.lastError += " (no answer: a filter, or a TCP MD5 password other than the router's)"
	}
}

// get is addr's session as followed so far.
func (s *sessions) get(addr netip.Addr) session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.peers[addr]; p != nil {
		return *p
	}
	return session{state: StateIdle}
}
