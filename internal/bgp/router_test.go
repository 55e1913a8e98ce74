package bgp

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// router is a second GoBGP server in the test process standing for the upstream router: it
// listens on a loopback address and free port and waits for the speaker to dial it.
type router struct {
	t    *testing.T
	srv  *server.BgpServer
	addr netip.Addr
	port uint16
	asn  uint32

	mu     sync.Mutex
	events []routerEvent
}

// routerEvent is a session state change the router saw, with its reason if it is a failure.
type routerEvent struct {
	state  bgp.FSMState
	reason string
}

// route is what the router holds for one prefix.
type route struct {
	nextHop     netip.Addr
	communities []Community
	med         *uint32
	localPref   *uint32
}

const speakerASN = 65100

// startRouter starts a router with AS asn on addr, passively peering with the speaker's
// address of the same family, with an optional TCP MD5 password. It stops with the test.
func startRouter(t *testing.T, addr netip.Addr, asn uint32, password string) *router {
	t.Helper()
	r := &router{t: t, addr: addr, asn: asn, port: freePort(t, addr)}
	r.srv = server.NewBgpServer()
	served := make(chan struct{})
	go func() {
		r.srv.Serve()
		close(served)
	}()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	t.Cleanup(func() {
		r.srv.Stop()
		stopWatch()
		<-served
	})
	ctx := context.Background()
	must(t, r.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:             asn,
		RouterId:        "10.255.0.1",
		ListenPort:      int32(r.port),
		ListenAddresses: []string{addr.String()},
	}}))
	must(t, r.srv.WatchEvent(watchCtx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
			if ev.Type == apiutil.PEER_EVENT_STATE {
				r.mu.Lock()
				r.events = append(r.events, routerEvent{ev.Peer.State.SessionState, failure(ev.Peer.State)})
				r.mu.Unlock()
			}
		},
	}, server.WatchPeer()))
	must(t, r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: speakerAddr(addr).String(), PeerAsn: speakerASN, AuthPassword: password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: 90, KeepaliveInterval: 30, ConnectRetry: 5, IdleHoldTimeAfterReset: 1,
		}},
		Transport: &api.Transport{PassiveMode: true},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: apiFamilyOf(addr), Enabled: true}}},
	}}))
	return r
}

// speakerAddr is the source address the speaker's connection to a router on addr has.
func speakerAddr(addr netip.Addr) netip.Addr {
	if addr.Is4() {
		return netip.MustParseAddr("127.0.0.1")
	}
	return netip.IPv6Loopback()
}

func freePort(t *testing.T, addr netip.Addr) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	n, _ := strconv.Atoi(port)
	return uint16(n)
}

// peer is the speaker's view of this router as a neighbour.
func (r *router) peer() Peer {
	return Peer{Address: r.addr, Port: r.port, ASN: r.asn}
}

// session is the router's session with the speaker.
func (r *router) session() *api.Peer {
	r.t.Helper()
	var found *api.Peer
	must(r.t, r.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) { found = p }))
	return found
}

func (r *router) established() bool {
	return r.session().GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED
}

// updates counts the UPDATE messages the router received from the speaker.
func (r *router) updates() uint64 {
	return r.session().GetState().GetMessages().GetReceived().GetUpdate()
}

// reset drops the session from the router's side (a Cease, administrative reset).
func (r *router) reset() {
	must(r.t, r.srv.ResetPeer(context.Background(), &api.ResetPeerRequest{Address: speakerAddr(r.addr).String()}))
}

// seen is every session state change the router saw so far.
func (r *router) seen() []routerEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// routes is the router's table for its family.
func (r *router) routes() map[netip.Prefix]route {
	r.t.Helper()
	out := map[netip.Prefix]route{}
	err := r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: familyOf(r.addr)},
		func(prefix bgp.NLRI, paths []*apiutil.Path) {
			p, err := netip.ParsePrefix(prefix.String())
			if err != nil || len(paths) == 0 {
				r.t.Errorf("router: unreadable path %v: %v", prefix, err)
				return
			}
			out[p] = routeOf(paths[0])
		})
	must(r.t, err)
	return out
}

func routeOf(p *apiutil.Path) route {
	var rt route
	for _, a := range p.Attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeNextHop:
			rt.nextHop = a.Value
		case *bgp.PathAttributeMpReachNLRI:
			rt.nextHop = a.Nexthop
		case *bgp.PathAttributeCommunities:
			for _, c := range a.Value {
				rt.communities = append(rt.communities, Community(c))
			}
		case *bgp.PathAttributeMultiExitDisc:
			rt.med = &a.Value
		case *bgp.PathAttributeLocalPref:
			rt.localPref = &a.Value
		}
	}
	return rt
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
