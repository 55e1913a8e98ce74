package plan

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
)

// BGPChange is a difference in what the node tells the routers, which plans do not hold: the bgp
// section added or removed, one of its settings, a peer added, removed or changed, or the path
// attributes of a service.
type BGPChange struct {
	Op string `json:"op"` // OpAdd, OpRemove or OpChange
	// Field is "bgp" (the section), "bgp.asn", "bgp.peers[10.9.0.1]" (a peer),
	// "bgp.peers[10.9.0.1].hold_time" (one of its settings) or "services[web].bgp".
	Field string `json:"field"`
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
}

// NoteBGP adds to c what differs in the bgp sections and the services' path attributes of two
// validated configs.
func (c *Change) NoteBGP(old, new *config.Config) {
	c.BGP = append(c.BGP, diffBGP(old.BGP, new.BGP)...)
	was := map[string]*config.PathAttributes{}
	for _, s := range old.Services {
		was[s.Name] = s.BGP
	}
	for _, s := range new.Services {
		o, ok := was[s.Name]
		if from, to := attributesText(o), attributesText(s.BGP); ok && from != to {
			c.BGP = append(c.BGP, BGPChange{Op: OpChange, Field: "services[" + s.Name + "].bgp", From: from, To: to})
		}
	}
}

// diffBGP lists what differs between two bgp sections, either of which may be nil.
func diffBGP(o, n *config.BGP) []BGPChange {
	switch {
	case o == nil && n == nil:
		return nil
	case o == nil:
		return []BGPChange{{Op: OpAdd, Field: "bgp", To: sectionText(n)}}
	case n == nil:
		return []BGPChange{{Op: OpRemove, Field: "bgp", From: sectionText(o)}}
	}
	out := changedSettings("bgp", sectionSettings(o), sectionSettings(n))
	before := map[netip.Addr]*config.BGPPeer{}
	for i := range o.Peers {
		before[o.Peers[i].Address.Addr] = &o.Peers[i]
	}
	for i := range n.Peers {
		p := &n.Peers[i]
		field := "bgp.peers[" + p.Address.String() + "]"
		was, ok := before[p.Address.Addr]
		delete(before, p.Address.Addr)
		if !ok {
			out = append(out, BGPChange{Op: OpAdd, Field: field, To: peerText(p)})
			continue
		}
		out = append(out, changedSettings(field, peerSettings(was), peerSettings(p))...)
		if was.Password != "" && p.Password != "" && was.Password != p.Password {
			out = append(out, BGPChange{Op: OpChange, Field: field + ".password", From: "set", To: "another"})
		}
	}
	for i := range o.Peers {
		if p := &o.Peers[i]; before[p.Address.Addr] != nil {
			out = append(out, BGPChange{Op: OpRemove, Field: "bgp.peers[" + p.Address.String() + "]", From: peerText(p)})
		}
	}
	return out
}

// setting is one setting of a bgp section or peer, as text.
type setting struct{ name, value string }

// changedSettings lists the settings whose values differ; both lists name the same settings.
func changedSettings(at string, o, n []setting) []BGPChange {
	var out []BGPChange
	for i := range n {
		if o[i].value != n[i].value {
			out = append(out, BGPChange{Op: OpChange, Field: at + "." + n[i].name, From: o[i].value, To: n[i].value})
		}
	}
	return out
}

// sectionSettings are the settings of the section itself, defaults filled in.
func sectionSettings(b *config.BGP) []setting {
	routerID := "the node's first IPv4 address"
	if b.RouterID.IsValid() {
		routerID = b.RouterID.String()
	}
	listen := "none (dials its peers only)"
	if p := b.ListenPortOrDefault(); p != config.NoListen {
		listen = strconv.Itoa(p)
	}
	return []setting{
		{"asn", strconv.FormatUint(uint64(b.ASN), 10)},
		{"router_id", routerID},
		{"listen_port", listen},
		{"shutdown_grace", b.ShutdownGraceOrDefault().String()},
	}
}

// peerSettings are the settings of a peer, defaults filled in; a password is only told set or
// not (diffBGP tells a changed one).
func peerSettings(p *config.BGPPeer) []setting {
	port := p.Port
	if port == 0 {
		port = 179
	}
	nextHop := "the session's address"
	if p.NextHop.IsValid() {
		nextHop = p.NextHop.String()
	}
	password := "none"
	if p.Password != "" {
		password = "set"
	}
	return []setting{
		{"port", strconv.Itoa(port)},
		{"asn", strconv.FormatUint(uint64(p.ASN), 10)},
		{"hold_time", p.HoldTimeOrDefault().String()},
		{"password", password},
		{"next_hop", nextHop},
		{"bfd", bfdText(p)},
		{"path_attributes", attributesText(&p.PathAttributes)},
	}
}

// bfdText is a peer's BFD: "off", or its interval and multiplier, like "100ms x 3".
func bfdText(p *config.BGPPeer) string {
	if !p.BFD {
		return "off"
	}
	return p.BFDIntervalOrDefault().String() + " x " + strconv.Itoa(p.BFDMultiplierOrDefault())
}

// sectionText sums up a bgp section added or removed.
func sectionText(b *config.BGP) string {
	parts := make([]string, 0, 5)
	for _, s := range sectionSettings(b) {
		parts = append(parts, s.name+" "+s.value)
	}
	return strings.Join(append(parts, strconv.Itoa(len(b.Peers))+" peers"), ", ")
}

// peerText sums up a peer added or removed.
func peerText(p *config.BGPPeer) string {
	var parts []string
	for _, s := range peerSettings(p) {
		parts = append(parts, s.name+" "+s.value)
	}
	return strings.Join(parts, ", ")
}

// attributesText renders path attributes: "none" without any.
func attributesText(a *config.PathAttributes) string {
	if a == nil || len(a.Communities) == 0 && a.MED == nil && a.LocalPref == nil {
		return "none"
	}
	var parts []string
	if len(a.Communities) > 0 {
		parts = append(parts, "communities "+strings.Join(a.Communities, " "))
	}
	if a.MED != nil {
		parts = append(parts, "med "+strconv.FormatUint(uint64(*a.MED), 10))
	}
	if a.LocalPref != nil {
		parts = append(parts, "local_pref "+strconv.FormatUint(uint64(*a.LocalPref), 10))
	}
	return strings.Join(parts, ", ")
}
