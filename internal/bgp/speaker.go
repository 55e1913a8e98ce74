package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/server"
	"google.golang.org/protobuf/proto"
)

// ErrClosed is returned by a Speaker after Close.
var ErrClosed = errors.New("bgp: speaker is closed")

// Speaker is an embedded BGP speaker driven with the whole desired state each time.
// Its methods are safe for concurrent use; Close must be called to stop it.
type Speaker struct {
	log      *slog.Logger
	sessions *sessions

	mu      sync.Mutex
	closed  bool
	srv     *server.BgpServer   // nil until the first Configure
	stopSrv func()              // stops srv and waits for its goroutines
	cfg     Config              // the identity srv runs with (no peers)
	peers   map[netip.Addr]Peer // the peers srv has
	policy  *api.SetPoliciesRequest
	desired []Announcement // what Set last asked for, sorted
	sent    map[netip.Prefix]Announcement
}

// New returns a Speaker that logs to logger (GoBGP's own messages from warnings up) and
// reports sessions going up and down to notify. notify may be nil; it is called from a
// goroutine of the Speaker's and must not block long.
func New(logger *slog.Logger, notify func(Event)) *Speaker {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Speaker{
		log:      logger,
		sessions: newSessions(notify),
		peers:    map[netip.Addr]Peer{},
		sent:     map[netip.Prefix]Announcement{},
	}
}

// Configure applies c. The first call starts the BGP server; later calls add new peers,
// delete removed ones and restart only the sessions whose ASN, port, hold time, password or
// BFD settings changed; a peer whose attributes or next hop changed gets its routes sent again
// on the same session. A changed ASN, router id or listen port restarts the server and
// re-announces. An invalid c, or a listen port another socket holds (*PortTakenError), is
// refused before anything changes.
func (s *Speaker) Configure(ctx context.Context, c Config) error {
	c, err := c.normalize()
	if err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.srv == nil || c.ASN != s.cfg.ASN || c.RouterID != s.cfg.RouterID || c.ListenPort != s.cfg.ListenPort {
		if s.srv == nil || c.ListenPort != s.cfg.ListenPort {
			// Before the running server stops: a port it cannot have leaves it untouched.
			if err := CheckListen(c.ListenPort); err != nil {
				return fmt.Errorf("bgp: %w", err)
			}
		}
		return s.restart(ctx, c)
	}
	return s.reconcile(ctx, c)
}

// Set makes desired the announced set: new prefixes are announced, missing ones withdrawn,
// ones whose attributes changed announced again, and nothing else is sent. Before the first
// Configure it is remembered and announced once the server runs.
func (s *Speaker) Set(ctx context.Context, desired []Announcement) error {
	desired, err := normalizeAnnouncements(desired)
	if err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.desired = desired
	if s.srv == nil {
		return nil
	}
	return s.announce()
}

// Status reports the identity, every configured peer's session and the announced set.
func (s *Speaker) Status(ctx context.Context) (Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Announced: slices.Clone(s.desired)}
	if s.closed {
		return st, ErrClosed
	}
	if s.srv == nil {
		return st, nil
	}
	st.ASN, st.RouterID, st.ListenPort = s.cfg.ASN, s.cfg.RouterID, s.cfg.ListenPort
	listed := map[netip.Addr]*api.Peer{}
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
			listed[a] = p
		}
	})
	if err != nil {
		return st, fmt.Errorf("bgp: list peers: %w", err)
	}
	for _, p := range s.peerList() {
		sess := s.sessions.get(p.Address)
		ps := PeerStatus{
			Address: p.Address, Port: p.Port, ASN: p.ASN,
			State: sess.state, Since: sess.since, Flaps: sess.flaps, LastError: sess.lastError,
		}
		if p.BFD != nil {
			ps.BFD = bfdStateOf(listed[p.Address].GetState().GetBfdState().GetSessionState())
		}
		if l := listed[p.Address]; l != nil && l.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED {
			ps.HoldTime = time.Duration(l.GetTimers().GetState().GetNegotiatedHoldTime()) * time.Second
			ps.PrefixesSent = prefixCount(l, (*api.AfiSafiState).GetAdvertised)
			ps.PrefixesReceived = prefixCount(l, (*api.AfiSafiState).GetReceived)
		}
		st.Peers = append(st.Peers, ps)
	}
	return st, nil
}

// Close ends every session with a Cease notification and stops the server and the
// Speaker's goroutines. Later calls fail with ErrClosed.
func (s *Speaker) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.srv != nil {
		s.stopSrv()
		s.srv = nil
	}
	s.sessions.stop()
	return nil
}

// restart (re)starts the server with c's identity and applies c's peers and the desired
// announcements. If the new server cannot start, the previous one is brought back.
func (s *Speaker) restart(ctx context.Context, c Config) error {
	previous, hadServer := s.cfg, s.srv != nil
	previous.Peers = s.peerList()
	if hadServer {
		s.stopSrv()
		s.srv = nil
		s.sessions.newGeneration("the speaker restarted for a new asn, router id or listen port")
		for _, p := range previous.Peers {
			if !slices.ContainsFunc(c.Peers, func(q Peer) bool { return q.Address == p.Address }) {
				s.sessions.forget(p.Address)
			}
		}
	}
	if err := s.start(ctx, c); err != nil {
		if hadServer {
			err2 := s.start(ctx, previous)
			if err2 == nil {
				err2 = s.reconcile(ctx, previous)
			}
			if err2 == nil {
				err2 = s.announce()
			}
			if err2 != nil {
				err = errors.Join(err, fmt.Errorf("restoring the previous config: %w", err2))
			}
		}
		return err
	}
	if err := s.reconcile(ctx, c); err != nil {
		return err
	}
	return s.announce()
}

// start runs a new GoBGP server with c's identity, no peers and the export policy
// assignment, and watches its sessions.
func (s *Speaker) start(ctx context.Context, c Config) error {
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	logger := slog.New(gobgpLog{Handler: s.log.Handler(), level: level, sessions: s.sessions}).With("component", "gobgp")
	srv := server.NewBgpServer(server.LoggerOption(logger, level))
	served := make(chan struct{})
	go func() {
		srv.Serve()
		close(served)
	}()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	stop := func() {
		srv.Stop()
		stopWatch()
		<-served
	}
	policy := apiPolicies(nil, c.ASN)
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: apiGlobal(c)})
	if err == nil {
		err = srv.SetPolicies(ctx, policy)
	}
	if err == nil {
		err = srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name:          "global",
			Direction:     api.PolicyDirection_POLICY_DIRECTION_EXPORT,
			Policies:      []*api.Policy{{Name: exportPolicy}},
			DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT,
		}})
	}
	if err == nil {
		// A generation of its own: events of an earlier server still queued are stale.
		gen := s.sessions.newGeneration("")
		err = srv.WatchEvent(watchCtx, server.WatchEventMessageCallbacks{
			OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, t time.Time) {
				if ev.Type == apiutil.PEER_EVENT_STATE {
					st := ev.Peer.State
					s.sessions.observe(gen, st.NeighborAddress.Unmap(), stateOf(st.SessionState), failure(st), t)
				}
			},
		}, server.WatchPeer())
	}
	if err != nil {
		stop()
		return fmt.Errorf("bgp: start server (asn %d, router id %v, listen port %d): %w", c.ASN, c.RouterID, c.ListenPort, err)
	}
	s.srv, s.stopSrv = srv, stop
	s.cfg = Config{ASN: c.ASN, RouterID: c.RouterID, ListenPort: c.ListenPort}
	s.peers = map[netip.Addr]Peer{}
	s.policy = policy
	s.sent = map[netip.Prefix]Announcement{}
	return nil
}

// reconcile makes the running server's peers and export policy those of c. Only sessions
// whose parameters changed restart; a peer whose attributes or next hop changed is sent its
// routes again. What was applied is remembered even when a later step fails.
func (s *Speaker) reconcile(ctx context.Context, c Config) error {
	if policy := apiPolicies(c.Peers, c.ASN); !proto.Equal(policy, s.policy) {
		if err := s.srv.SetPolicies(ctx, policy); err != nil {
			return fmt.Errorf("bgp: set export policy: %w", err)
		}
		s.policy = policy
	}
	wanted := make(map[netip.Addr]Peer, len(c.Peers))
	for _, p := range c.Peers {
		wanted[p.Address] = p
	}
	for addr, old := range s.peers {
		if p, ok := wanted[addr]; ok && p.sessionEqual(old) {
			continue
		}
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}); err != nil {
			return fmt.Errorf("bgp: delete peer %v: %w", addr, err)
		}
		delete(s.peers, addr)
		if _, ok := wanted[addr]; !ok {
			s.sessions.forget(addr)
		}
	}
	for _, p := range c.Peers {
		old, ok := s.peers[p.Address]
		switch {
		case !ok:
			s.sessions.track(p.Address)
			if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
				return fmt.Errorf("bgp: add peer %v: %w", p.Address, err)
			}
		case !old.exportEqual(p):
			err := s.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: p.Address.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_OUT})
			if err != nil {
				return fmt.Errorf("bgp: resend routes to peer %v: %w", p.Address, err)
			}
		}
		s.peers[p.Address] = p
	}
	return nil
}

// peerList is the server's peers sorted by address.
func (s *Speaker) peerList() []Peer {
	list := make([]Peer, 0, len(s.peers))
	for _, p := range s.peers {
		list = append(list, p)
	}
	slices.SortFunc(list, func(a, b Peer) int { return a.Address.Compare(b.Address) })
	return list
}

// announce brings the server's paths to s.desired: one batch of withdrawals, one of
// announcements, and nothing for prefixes whose attributes did not change.
func (s *Speaker) announce() error {
	wanted := make(map[netip.Prefix]bool, len(s.desired))
	var added, withdrawn []Announcement
	for _, a := range s.desired {
		wanted[a.Prefix] = true
		if old, ok := s.sent[a.Prefix]; !ok || !old.Attributes.equal(a.Attributes) {
			added = append(added, a)
		}
	}
	for prefix, a := range s.sent {
		if !wanted[prefix] {
			withdrawn = append(withdrawn, a)
		}
	}
	add, err := pathsOf(added)
	if err != nil {
		return err
	}
	withdraw, err := pathsOf(withdrawn)
	if err != nil {
		return err
	}
	if len(withdraw) > 0 {
		if err := s.srv.DeletePath(apiutil.DeletePathRequest{Paths: withdraw}); err != nil {
			return fmt.Errorf("bgp: withdraw %d prefixes: %w", len(withdraw), err)
		}
		for _, a := range withdrawn {
			delete(s.sent, a.Prefix)
		}
	}
	if len(add) > 0 {
		if _, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: add}); err != nil {
			return fmt.Errorf("bgp: announce %d prefixes: %w", len(add), err)
		}
		for _, a := range added {
			s.sent[a.Prefix] = a
		}
	}
	return nil
}

// pathsOf is the path of each announcement of as.
func pathsOf(as []Announcement) ([]*apiutil.Path, error) {
	paths := make([]*apiutil.Path, 0, len(as))
	for _, a := range as {
		p, err := pathOf(a)
		if err != nil {
			return nil, fmt.Errorf("bgp: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// gobgpLog passes GoBGP's records at or above level on to the speaker's log, and hands a
// peer's failed connection attempts (debug records of the peer's logger, which GoBGP tells no
// other way) and BFD failures (warnings) to sessions as the peer's last error.
type gobgpLog struct {
	slog.Handler
	level    slog.Leveler
	sessions *sessions
	peer     netip.Addr // the neighbour of a peer's logger (its "Key" attribute)
}

// connectFailed is the message of GoBGP's record of a failed connection attempt, whose "Error"
// attribute says why.
const connectFailed = "failed to connect"

// bfdDown are the messages of GoBGP's records of a peer's BFD session failing, which it logs
// (as warnings, with the topic "bfd" and the "Peer" attribute) just before it resets the BGP
// session, and what each means as the reason the session went down.
var bfdDown = map[string]string{
	"Expired":                       "BFD down: no BFD packet from the peer within the detection time",
	"Remote peer signaled BFD down": "BFD down: the peer's BFD session went down",
}

// bfdPeer is the peer a BFD record of GoBGP's is about.
func bfdPeer(r slog.Record) (netip.Addr, bool) {
	var topic, peer string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "Topic":
			topic = a.Value.String()
		case "Peer":
			peer = a.Value.String()
		}
		return true
	})
	addr, err := netip.ParseAddr(peer)
	return addr.Unmap(), topic == "bfd" && err == nil
}

func (h gobgpLog) Enabled(ctx context.Context, l slog.Level) bool {
	return h.peer.IsValid() || l >= slog.LevelWarn || l >= h.level.Level() && h.Handler.Enabled(ctx, l)
}

func (h gobgpLog) Handle(ctx context.Context, r slog.Record) error {
	if why, ok := bfdDown[r.Message]; ok {
		if peer, ok := bfdPeer(r); ok {
			h.sessions.bfdFailed(peer, why)
		}
	}
	if h.peer.IsValid() && r.Message == connectFailed {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "Error" {
				h.sessions.connectFailed(h.peer, a.Value.String())
				return false
			}
			return true
		})
	}
	if r.Level < h.level.Level() || !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h gobgpLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	for _, a := range attrs {
		if addr, err := netip.ParseAddr(a.Value.String()); a.Key == "Key" && err == nil {
			h.peer = addr.Unmap()
		}
	}
	h.Handler = h.Handler.WithAttrs(attrs)
	return h
}

func (h gobgpLog) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}
