package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Announcer announces the VIPs that can take new flows to routers; bgp.Speaker is the real one.
type Announcer interface {
	Configure(ctx context.Context, c bgp.Config) error
	Set(ctx context.Context, desired []bgp.Announcement) error
	Status(ctx context.Context) (bgp.Status, error)
	Close(ctx context.Context) error
}

// VIPView is what the node tells the routers about one VIP, and why.
type VIPView struct {
	VIP       string   `json:"vip"`
	Announced bool     `json:"announced"`
	Reason    string   `json:"reason"`
	Services  []string `json:"services"`
	// Role is what a prefix that is not a VIP is: RoleFullNATSource, RoleBackupFullNATSource.
	Role string `json:"role,omitempty"`
	// Since is when Announced last changed.
	Since time.Time `json:"since"`
}

// BGPView is the node's BGP state: its identity, its sessions and its VIPs.
type BGPView struct {
	// Enabled tells whether the config has a bgp section.
	Enabled    bool     `json:"enabled"`
	ASN        uint32   `json:"asn,omitempty"`
	RouterID   string   `json:"router_id,omitempty"`
	ListenPort int32    `json:"listen_port,omitempty"`
	Node       NodeView `json:"node"`
	// Failed says why the speaker refused the running config's bgp section, which it does not
	// run yet, and when it is tried again; empty when it runs it.
	Failed string     `json:"failed,omitempty"`
	Peers  []PeerView `json:"peers"`
	VIPs   []VIPView  `json:"vips"`
}

// PeerView is one BGP session.
type PeerView struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	ASN     uint32 `json:"asn"`
	// State is the session's FSM state: idle, connect, active, opensent, openconfirm, established.
	State string `json:"state"`
	// Since is when State began: the session's uptime when established.
	Since            time.Time `json:"since,omitzero"`
	HoldTimeSeconds  float64   `json:"hold_time_seconds,omitempty"`
	PrefixesSent     int       `json:"prefixes_sent"`
	PrefixesReceived int       `json:"prefixes_received"`
	// Flaps counts the times the session went down after it was established.
	Flaps     uint64 `json:"flaps"`
	LastError string `json:"last_error,omitempty"`
	// BFD is the BFD session's state: down, init, up or admindown; empty when the peer runs none.
	BFD string `json:"bfd,omitempty"`
}

// announcing is the engine's BGP side, under a lock of its own. The reconcile loop changes it
// (announce), and Shutdown once the loop ended; the API and the config checks read it.
type announcing struct {
	mu         sync.Mutex
	speaker    Announcer   // nil while the config has no bgp section
	configured *config.BGP // the section speaker runs with
	refused    retry       // the section the speaker last refused, tried again after a delay
	vips       map[netip.Addr]VIPView
	shutdown   bool // the daemon is stopping: everything is withdrawn
}

// running returns the speaker (nil when none runs) and the section it runs with.
func (a *announcing) running() (Announcer, *config.BGP) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.speaker, a.configured
}

// stopping tells whether the daemon is stopping.
func (a *announcing) stopping() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shutdown
}

// forget drops the speaker, its section and the VIPs, and returns the speaker to close.
func (a *announcing) forget() Announcer {
	a.mu.Lock()
	defer a.mu.Unlock()
	speaker := a.speaker
	a.speaker, a.configured, a.vips = nil, nil, nil
	return speaker
}

// record keeps the decisions made at now as the VIPs' views and returns the events of what
// changed.
func (a *announcing) record(decisions []vipDecision, now time.Time) []Event {
	next := make(map[netip.Addr]VIPView, len(decisions))
	var changes []Event
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range decisions {
		v, vip := d.view, d.ann.Prefix.Addr()
		old, known := a.vips[vip]
		v.Since = old.Since
		if !known || old.Announced != v.Announced {
			v.Since = now
			kind := EventVIPWithdrawn
			if v.Announced {
				kind = EventVIPAnnounced
			}
			if known || v.Announced {
				changes = append(changes, Event{Type: kind, Message: v.VIP + ": " + v.Reason})
			}
		}
		next[vip] = v
	}
	for vip, old := range a.vips {
		if _, still := next[vip]; !still && old.Announced {
			changes = append(changes, Event{Type: EventVIPWithdrawn, Message: old.VIP + ": no service has it any more"})
		}
	}
	a.vips = next
	return changes
}

// view fills in the part of a BGPView the engine keeps, for the bgp section running (nil: none),
// and returns the speaker to ask for the rest.
func (a *announcing) view(section *config.BGP) (BGPView, Announcer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	view := BGPView{Enabled: section != nil, Failed: a.refused.describe(section), Peers: []PeerView{}, VIPs: []VIPView{}}
	for _, vip := range slices.SortedFunc(maps.Keys(a.vips), netip.Addr.Compare) {
		view.VIPs = append(view.VIPs, a.vips[vip])
	}
	return view, a.speaker
}

// maxRetryDelay bounds the delay before a bgp section the speaker refused is tried again.
const maxRetryDelay = time.Minute

// retry is when a bgp section the speaker refused is tried again: the delay starts at the
// announce interval and doubles with every refusal of the same section, up to maxRetryDelay.
type retry struct {
	section *config.BGP
	err     error // why the speaker refused it
	delay   time.Duration
	at      time.Time
}

// after is the retry of section refused again at now for err; first is the delay of a first
// refusal.
func (r retry) after(section *config.BGP, err error, now time.Time, first time.Duration) retry {
	delay := first
	if reflect.DeepEqual(r.section, section) {
		delay = min(2*r.delay, maxRetryDelay)
	}
	return retry{section: section, err: err, delay: delay, at: now.Add(delay)}
}

// describe says why section is not running, "" when r is not about it.
func (r retry) describe(section *config.BGP) string {
	if r.section == nil || !reflect.DeepEqual(r.section, section) {
		return ""
	}
	return fmt.Sprintf("the speaker refused the bgp section (tried again at %s): %v", r.at.Format(time.TimeOnly), r.err)
}

// waits tells whether section is the refused one and its retry is not due at now.
func (r retry) waits(section *config.BGP, now time.Time) bool {
	return reflect.DeepEqual(r.section, section) && now.Before(r.at)
}

// vipDecision is the announcement of one VIP computed from the applied plan.
type vipDecision struct {
	view VIPView
	ann  bgp.Announcement
}

// announce brings the BGP speaker in line with the config's bgp section and announces the VIPs
// that can take new flows; it runs on the reconcile loop after every reconcile. applyErr is the
// reconcile's error: a datapath that failed to apply withdraws every VIP.
func (e *Engine) announce(ctx context.Context, applyErr error) {
	e.mu.Lock()
	section := e.cfg.BGP.Clone()
	e.mu.Unlock()
	speaker, configured := e.bgp.running()
	if section == nil {
		if speaker != nil {
			e.stopSpeaker(ctx, "the bgp section was removed")
		}
		return
	}
	if speaker == nil {
		speaker = e.opts.NewAnnouncer(e.sessionEvent)
		e.bgp.mu.Lock()
		e.bgp.speaker = speaker
		e.bgp.mu.Unlock()
	}
	if !reflect.DeepEqual(section, configured) && !e.configureSpeaker(ctx, speaker, section) {
		return
	}
	decisions := e.decide(applyErr)
	desired := make([]bgp.Announcement, 0, len(decisions))
	for _, d := range decisions {
		if d.view.Announced {
			desired = append(desired, d.ann)
		}
	}
	if err := speaker.Set(ctx, desired); err != nil {
		e.log.Error("bgp: announcing failed; will retry", "err", err)
		e.publish(Event{Type: EventBGPFailed, Message: err.Error()})
		return
	}
	e.recordVIPs(decisions)
}

// configureSpeaker hands section to the speaker and tells whether it took it. A refused section
// is tried again after a delay that grows (retry), not at every announce: a speaker that cannot
// start does not restart in a tight loop, and its failure is one event counting the repeats.
func (e *Engine) configureSpeaker(ctx context.Context, speaker Announcer, section *config.BGP) bool {
	e.bgp.mu.Lock()
	refused := e.bgp.refused
	e.bgp.mu.Unlock()
	if refused.waits(section, time.Now()) {
		return false
	}
	c, err := e.speakerConfig(section)
	if err == nil {
		err = speaker.Configure(ctx, c)
	}
	e.bgp.mu.Lock()
	defer e.bgp.mu.Unlock()
	if err != nil {
		e.bgp.refused = refused.after(section, err, time.Now(), e.opts.AnnounceInterval)
		e.log.Error("bgp: configuring the speaker failed; the running sessions stay", "err", err, "retry_in", e.bgp.refused.delay)
		e.publish(Event{Type: EventBGPFailed, Message: err.Error()})
		return false
	}
	e.bgp.refused = retry{}
	e.bgp.configured = section
	return true
}

// checkBGP refuses a config whose bgp section the running speaker could not take: a listen port
// other than the one it has, that another socket holds. Nothing changes then, and the speaker
// keeps its sessions. e.mu is held.
func (e *Engine) checkBGP(next *config.Config) error {
	if next.BGP == nil {
		return nil
	}
	port := next.BGP.ListenPortOrDefault()
	if _, configured := e.bgp.running(); configured != nil && configured.ListenPortOrDefault() == port {
		return nil
	}
	err := bgp.CheckListen(int32(port))
	var taken *bgp.PortTakenError
	switch {
	case errors.As(err, &taken):
		return config.Errors{{Path: "bgp.listen_port", Msg: taken.What() + ": the running BGP speaker keeps its port and sessions"}}
	case err != nil:
		return config.Errors{{Path: "bgp.listen_port", Msg: strings.TrimPrefix(err.Error(), "listen_port: ")}}
	}
	return nil
}

// recordVIPs keeps the decisions for BGP views and publishes what changed.
func (e *Engine) recordVIPs(decisions []vipDecision) {
	for _, ev := range e.bgp.record(decisions, time.Now()) {
		e.publish(ev)
	}
}

// decide computes, for every VIP of the applied plan, whether to announce it and why.
func (e *Engine) decide(applyErr error) []vipDecision {
	c := conditions{applyErr: applyErr, shutdown: e.bgp.stopping(), node: e.node.state()}
	c.synced, c.syncWhy = e.syncReady() // before e.mu: the replicator has locks of its own
	e.mu.Lock()
	defer e.mu.Unlock()
	p, cfg := e.applied, e.cfg
	byVIP := map[netip.Addr][]string{}
	var order []netip.Addr
	for _, s := range cfg.Services {
		vip := s.VIP.Addr
		if _, seen := byVIP[vip]; !seen {
			order = append(order, vip)
		}
		byVIP[vip] = append(byVIP[vip], s.Name)
	}
	slices.SortFunc(order, netip.Addr.Compare)
	c.off = e.forwardingOff(p)
	out := make([]vipDecision, 0, len(order))
	for _, vip := range order {
		d := vipDecision{
			view: VIPView{VIP: vip.String(), Services: byVIP[vip]},
			ann:  bgp.Announcement{Prefix: netip.PrefixFrom(vip, vip.BitLen())},
		}
		d.view.Announced, d.view.Reason = e.announceable(vip, p, c)
		if attrs := serviceAttributes(cfg, vip); attrs != nil {
			d.ann.Attributes = bgpAttributes(*attrs)
		}
		out = append(out, d)
	}
	return append(out, sourceDecisions(cfg, p, c)...)
}

// forwardingOff are the forwarding sysctls that services of the applied plan p need and the
// balancer's namespace has off (turned off after the apply): by sysctl name, a service that needs
// it.
func (e *Engine) forwardingOff(p *plan.Plan) map[string]string {
	var fe *datapath.ForwardingError
	if !errors.As(e.checkForwarding(p), &fe) {
		return nil
	}
	off := map[string]string{}
	for _, n := range fe.Off {
		off[n.Sysctl] = n.Sysctl + "=0: the kernel drops what the balancer should forward (sysctl -w " + n.Sysctl + "=1)"
	}
	return off
}

// conditions are what the node as a whole must have before it announces a VIP.
type conditions struct {
	applyErr error  // the last reconcile's
	shutdown bool   // the daemon is stopping
	node     string // the node's drain state
	// off are the forwarding sysctls that are off (forwardingOff), by name.
	off map[string]string
	// synced tells whether the replication has the flows' state it needs (syncReady), syncWhy why.
	synced  bool
	syncWhy string
}

// nodeWithdraws tells why the node as a whole announces nothing now, "" when it may: it stops,
// is drained, failed to apply, waits for the peers' flows, or has not programmed anything yet.
func nodeWithdraws(p *plan.Plan, c conditions) string {
	switch {
	case c.shutdown:
		return "withdrawn: the daemon is shutting down"
	case c.node != NodeActive:
		return "withdrawn: the node is " + c.node + " (sluice node drain)"
	case c.applyErr != nil:
		return "withdrawn: the datapath failed to apply: " + c.applyErr.Error()
	case !c.synced:
		return "withdrawn: " + c.syncWhy
	case p == nil:
		return "withdrawn: not programmed yet"
	}
	return ""
}

// announceable tells whether the node announces vip, and why. e.mu is held.
func (e *Engine) announceable(vip netip.Addr, p *plan.Plan, c conditions) (bool, string) {
	if why := nodeWithdraws(p, c); why != "" {
		return false, why
	}
	var ready, waiting []string
	programmed, unforwarded := false, ""
	for i := range p.Services {
		s := &p.Services[i]
		if s.VIP != vip {
			continue
		}
		programmed = true
		if why, isOff := c.off[datapath.ForwardingSysctl(s.VIP)]; isOff && datapath.NeedsForwarding(p.Datapath, s) {
			unforwarded = why
			continue
		}
		switch e.serviceReadiness(s) {
		case serviceReady:
			ready = append(ready, s.Name)
		case serviceUnproven:
			waiting = append(waiting, s.Name)
		case serviceDown:
		}
	}
	switch {
	case !programmed:
		return false, "withdrawn: not programmed yet"
	case len(ready) > 0:
		return true, "announced: " + strings.Join(ready, ", ") + " can take new flows"
	case len(waiting) > 0:
		return false, "withdrawn: waiting for the first health check results of " + strings.Join(waiting, ", ")
	case unforwarded != "":
		return false, "withdrawn: " + unforwarded
	}
	return false, "withdrawn: no service on it can take new flows (no backend available, no sorry server)"
}

type readiness int

const (
	serviceDown     readiness = iota // no backend takes new flows
	serviceUnproven                  // its backends take new flows, but no health check has passed yet
	serviceReady                     // a backend that passed its checks (or is not checked) takes new flows
)

// serviceReadiness tells whether a programmed service can take new flows: a backend (or sorry
// server) holds slots and is either unchecked or has passed its health check at least once. A
// node that has just started counts its backends as up until checked; it must not attract
// traffic on that assumption alone. e.mu is held.
func (e *Engine) serviceReadiness(s *plan.Service) readiness {
	if len(s.Slots) == 0 {
		return serviceDown
	}
	var cs *config.Service
	for i := range e.cfg.Services {
		if e.cfg.Services[i].Name == s.Name {
			cs = &e.cfg.Services[i]
		}
	}
	if cs == nil {
		return serviceDown
	}
	unproven := false
	for _, b := range s.Backends {
		if b.Weight == 0 {
			continue
		}
		if isSorryServer(cs, b) { // not checked: sorry servers are the last resort
			return serviceReady
		}
		probe, checked := probeOf(cs, b.Addr, b.Port)
		if !checked {
			return serviceReady
		}
		st, ok := e.prober.Status(probe.Key())
		switch {
		case ok && st.Up && st.Checks > 0:
			return serviceReady
		case !ok || st.Checks == 0:
			unproven = true
		}
	}
	if unproven {
		return serviceUnproven
	}
	return serviceDown // every backend still in the table failed its check: the next plan drops them
}

// isSorryServer tells whether b is one of the service's sorry servers.
func isSorryServer(cs *config.Service, b plan.Backend) bool {
	for _, sorry := range cs.SorryServers {
		if sorry.Address.Addr == b.Addr && (sorry.Port == int(b.Port) || cs.Mode.Direct()) {
			return true
		}
	}
	return false
}

// serviceAttributes are the path attributes the services of vip set (they agree: validated).
func serviceAttributes(cfg *config.Config, vip netip.Addr) *config.PathAttributes {
	for i := range cfg.Services {
		if s := &cfg.Services[i]; s.BGP != nil && s.VIP.Addr == vip {
			return s.BGP
		}
	}
	return nil
}

func bgpAttributes(a config.PathAttributes) bgp.Attributes {
	out := bgp.Attributes{MED: a.MED, LocalPref: a.LocalPref}
	for _, text := range a.Communities {
		c, _ := config.ParseCommunity(text) // validated
		out.Communities = append(out.Communities, bgp.Community(c))
	}
	return out
}

// speakerConfig turns the bgp section into the speaker's config; the router id defaults to the
// node's first IPv4 address.
func (e *Engine) speakerConfig(b *config.BGP) (bgp.Config, error) {
	c := bgp.Config{ASN: b.ASN, ListenPort: int32(b.ListenPortOrDefault())}
	if b.RouterID.IsValid() {
		c.RouterID = b.RouterID.Addr
	} else {
		id, err := e.opts.RouterID()
		if err != nil {
			return bgp.Config{}, fmt.Errorf("bgp.router_id: not set, and %w: set it", err)
		}
		c.RouterID = id
	}
	for _, p := range b.Peers {
		peer := bgp.Peer{
			Address: p.Address.Addr, Port: uint16(p.Port), ASN: p.ASN, NextHop: p.NextHop.Addr,
			HoldTime: p.HoldTimeOrDefault(), Password: p.Password,
			Attributes: bgpAttributes(p.PathAttributes),
		}
		if p.BFD {
			peer.BFD = &bgp.BFD{Interval: p.BFDIntervalOrDefault(), Multiplier: uint8(p.BFDMultiplierOrDefault())}
		}
		c.Peers = append(c.Peers, peer)
	}
	return c, nil
}

// sessionEvent publishes a BGP session going up or down.
func (e *Engine) sessionEvent(ev bgp.Event) {
	kind := EventBGPPeerDown
	if ev.Kind == bgp.PeerUp {
		kind = EventBGPPeerUp
	}
	msg := fmt.Sprintf("peer %s: %s", ev.Peer, ev.State)
	if ev.Reason != "" {
		msg += " (" + ev.Reason + ")"
	}
	e.publish(Event{Type: kind, Message: msg})
}

// stopSpeaker closes the speaker (its sessions end with a Cease) and forgets the VIPs.
func (e *Engine) stopSpeaker(ctx context.Context, why string) {
	speaker := e.bgp.forget()
	if speaker == nil {
		return
	}
	if err := speaker.Close(ctx); err != nil {
		e.log.Warn("bgp: closing the speaker", "err", err)
	}
	e.publish(Event{Type: EventVIPWithdrawn, Message: "every vip: " + why})
}

// Shutdown withdraws every VIP, keeps forwarding for the bgp section's shutdown grace so that the
// routers move the flows to other nodes first, then ends the BGP sessions. Call it after Run
// returned; ctx bounds the whole.
func (e *Engine) Shutdown(ctx context.Context) {
	e.mu.Lock()
	var grace time.Duration
	if e.cfg.BGP != nil {
		grace = e.cfg.BGP.ShutdownGraceOrDefault()
	}
	e.mu.Unlock()
	e.bgp.mu.Lock()
	speaker := e.bgp.speaker
	e.bgp.shutdown = true
	e.bgp.mu.Unlock()
	if speaker == nil {
		return
	}
	if err := speaker.Set(ctx, nil); err != nil {
		e.log.Error("bgp: withdrawing on shutdown failed", "err", err)
	} else {
		e.recordVIPs(e.decide(nil))
		e.log.Info("bgp: every vip withdrawn; forwarding on for the shutdown grace", "grace", grace)
		select {
		case <-ctx.Done():
		case <-time.After(grace):
		}
	}
	e.stopSpeaker(ctx, "the daemon stopped")
}

// BGP describes the node's BGP sessions and the announcement of each VIP.
func (e *Engine) BGP(ctx context.Context) (BGPView, error) {
	view, speaker := e.bgp.view(e.running().BGP)
	view.Node = e.Node()
	if speaker == nil {
		return view, nil
	}
	st, err := speaker.Status(ctx)
	if err != nil {
		return BGPView{}, err
	}
	view.ASN, view.RouterID, view.ListenPort = st.ASN, st.RouterID.String(), st.ListenPort
	for _, p := range st.Peers {
		view.Peers = append(view.Peers, PeerView{
			Address: p.Address.String(), Port: p.Port, ASN: p.ASN, State: string(p.State), Since: p.Since,
			HoldTimeSeconds: p.HoldTime.Seconds(), PrefixesSent: p.PrefixesSent, PrefixesReceived: p.PrefixesReceived,
			Flaps: p.Flaps, LastError: p.LastError, BFD: string(p.BFD),
		})
	}
	return view, nil
}
