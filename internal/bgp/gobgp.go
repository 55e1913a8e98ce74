package bgp

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// Session timers the speaker uses for every peer: a router that resets the session or
// comes back is dialled again within seconds, not GoBGP's default two minutes.
const (
	connectRetry   = 5 * time.Second
	idleAfterReset = 5 * time.Second
)

// exportPolicy names the one global export policy holding a statement per peer.
const exportPolicy = "sluice-peers"

// familyOf is the address family a peer or prefix of this address belongs to.
func familyOf(a netip.Addr) bgp.Family {
	if a.Is4() {
		return bgp.RF_IPv4_UC
	}
	return bgp.RF_IPv6_UC
}

func apiFamilyOf(a netip.Addr) *api.Family {
	if a.Is4() {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}

// apiGlobal is GoBGP's global config for c; the listeners cover both families.
func apiGlobal(c Config) *api.Global {
	return &api.Global{
		Asn:        c.ASN,
		RouterId:   c.RouterID.String(),
		ListenPort: c.ListenPort,
	}
}

// apiPeer is GoBGP's neighbour config for p, with the one family of its address.
func apiPeer(p Peer) *api.Peer {
	hold := uint64(p.HoldTime / time.Second)
	return &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    p.Password,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime:               hold,
			KeepaliveInterval:      hold / 3,
			ConnectRetry:           uint64(connectRetry / time.Second),
			IdleHoldTimeAfterReset: uint64(idleAfterReset / time.Second),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		AfiSafis: []*api.AfiSafi{{
			Config: &api.AfiSafiConfig{Family: apiFamilyOf(p.Address), Enabled: true},
		}},
		Bfd: apiBFD(p.BFD),
	}
}

// apiBFD is GoBGP's BFD config for b (nil: none), with the one interval as both the desired
// min tx and the required min rx interval, in microseconds, and the peer's port 3784 (RFC 5881).
// GoBGP resets the BGP session when the BFD session fails: its detection time passes without
// a packet, or the peer says it is down.
func apiBFD(b *BFD) *api.BfdPeerConfig {
	if b == nil {
		return nil
	}
	us := uint32(b.Interval / time.Microsecond)
	return &api.BfdPeerConfig{
		Enabled:                  true,
		Port:                     server.BfdServerPort,
		DesiredMinimumTxInterval: us,
		RequiredMinimumReceive:   us,
		DetectionMultiplier:      uint32(b.Multiplier),
	}
}

// bfdStateOf maps GoBGP's BFD session state.
func bfdStateOf(s api.BfdSessionState) BFDState {
	switch s {
	case api.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
		return BFDAdminDown
	case api.BfdSessionState_BFD_SESSION_STATE_INIT:
		return BFDInit
	case api.BfdSessionState_BFD_SESSION_STATE_UP:
		return BFDUp
	default:
		return BFDDown
	}
}

// pathOf is the locally originated path for a: origin IGP and an unspecified next hop,
// which GoBGP replaces by each session's local address (or the peer's policy next hop).
func pathOf(a Announcement) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(a.Prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix %v: %w", a.Prefix, err)
	}
	family := familyOf(a.Prefix.Addr())
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	if family == bgp.RF_IPv4_UC {
		nh, err := bgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, nh)
	} else {
		mp, err := bgp.NewPathAttributeMpReachNLRI(family, []bgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, mp)
	}
	if len(a.Communities) > 0 {
		values := make([]uint32, len(a.Communities))
		for i, c := range a.Communities {
			values[i] = uint32(c)
		}
		attrs = append(attrs, bgp.NewPathAttributeCommunities(values))
	}
	if a.MED != nil {
		attrs = append(attrs, bgp.NewPathAttributeMultiExitDisc(*a.MED))
	}
	if a.LocalPref != nil {
		attrs = append(attrs, bgp.NewPathAttributeLocalPref(*a.LocalPref))
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs}, nil
}

// apiPolicies is the whole routing policy for peers: one export policy, assigned globally,
// with a statement per peer that has attributes or a next hop of its own, matched on the
// neighbour the path is sent to.
func apiPolicies(peers []Peer, localASN uint32) *api.SetPoliciesRequest {
	req := &api.SetPoliciesRequest{}
	policy := &api.Policy{Name: exportPolicy}
	for _, p := range peers {
		actions := peerActions(p, localASN)
		if actions == nil {
			continue
		}
		name := "peer-" + p.Address.String()
		req.DefinedSets = append(req.DefinedSets, &api.DefinedSet{
			DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR,
			Name:        name,
			List:        []string{netip.PrefixFrom(p.Address, p.Address.BitLen()).String()},
		})
		policy.Statements = append(policy.Statements, &api.Statement{
			Name:       name,
			Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: name}},
			Actions:    actions,
		})
	}
	req.Policies = []*api.Policy{policy}
	return req
}

// peerActions is what p's statement does to a path, nil when p has nothing of its own.
// LOCAL_PREF is only sent over iBGP, so it is left out for an eBGP peer.
func peerActions(p Peer, localASN uint32) *api.Actions {
	a := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT}
	used := false
	if len(p.Communities) > 0 {
		list := make([]string, len(p.Communities))
		for i, c := range p.Communities {
			list[i] = c.String()
		}
		a.Community = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: list}
		used = true
	}
	if p.MED != nil {
		a.Med = &api.MedAction{Type: api.MedAction_TYPE_REPLACE, Value: int64(*p.MED)}
		used = true
	}
	if p.LocalPref != nil && p.ASN == localASN {
		a.LocalPref = &api.LocalPrefAction{Value: *p.LocalPref}
		used = true
	}
	if p.NextHop.IsValid() {
		a.Nexthop = &api.NexthopAction{Address: p.NextHop.String()}
		used = true
	}
	if !used {
		return nil
	}
	return a
}

// stateOf maps GoBGP's session state.
func stateOf(s bgp.FSMState) PeerState {
	switch s {
	case bgp.BGP_FSM_CONNECT:
		return StateConnect
	case bgp.BGP_FSM_ACTIVE:
		return StateActive
	case bgp.BGP_FSM_OPENSENT:
		return StateOpenSent
	case bgp.BGP_FSM_OPENCONFIRM:
		return StateOpenConfirm
	case bgp.BGP_FSM_ESTABLISHED:
		return StateEstablished
	default:
		return StateIdle
	}
}

// failure is why a session state change happened, when that is an error (a notification,
// an expired hold timer, a broken connection) rather than the session's normal progress.
func failure(st apiutil.PeerState) string {
	switch st.DisconnectReason {
	case api.PeerState_DISCONNECT_REASON_UNSPECIFIED, api.PeerState_DISCONNECT_REASON_IDLE_TIMER_EXPIRED:
		return ""
	default:
		return st.DisconnectMessage
	}
}

// prefixCount sums one of a peer's per-family counters.
func prefixCount(p *api.Peer, count func(*api.AfiSafiState) uint64) int {
	n := uint64(0)
	for _, af := range p.AfiSafis {
		if af.State != nil {
			n += count(af.State)
		}
	}
	return int(n)
}
