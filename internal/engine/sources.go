package engine

import (
	"net/netip"
	"slices"

	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// A fullnat fleet (bgp.fullnat_sources, docs/scale-out.md): each node translates its fullnat
// flows to a source address of its own and announces it, as a host route, under the same
// conditions as its VIPs; it announces every other node's source as a backup route (less
// preferred), so that the routers send the replies of a gone (or drained) node's flows to the
// nodes that hold those flows through sync.

// The roles of the announcements that are not VIPs (VIPView.Role).
const (
	RoleFullNATSource       = "fullnat source"
	RoleBackupFullNATSource = "backup fullnat source"
)

// sourceDecisions are the announcements of cfg's bgp.fullnat_sources: the node's own (the
// sources its fullnat services translate to) and the others as backups. e.mu is held.
func sourceDecisions(cfg *config.Config, p *plan.Plan, c conditions) []vipDecision {
	if cfg.BGP == nil || len(cfg.BGP.FullNATSources) == 0 {
		return nil
	}
	own := cfg.OwnFullNATSources()
	withdrawn := nodeWithdraws(p, c)
	var out []vipDecision
	for _, src := range cfg.BGP.FullNATSources {
		a := src.Unmap()
		d := vipDecision{
			view: VIPView{VIP: a.String(), Role: RoleBackupFullNATSource, Services: []string{}},
			ann:  bgp.Announcement{Prefix: netip.PrefixFrom(a, a.BitLen())},
		}
		if own[a] {
			d.view.Role, d.view.Services = RoleFullNATSource, servicesTranslatingTo(cfg, a)
			d.view.Reason = "announced: this node's fullnat source"
		} else {
			med, pref := uint32(config.BackupSourceMED), uint32(config.BackupSourceLocalPref)
			d.ann.Attributes = bgp.Attributes{MED: &med, LocalPref: &pref}
			d.view.Reason = "announced as a backup (med 100, local_pref 50): another node's fullnat source, whose flows this node holds through sync"
		}
		d.view.Announced = withdrawn == ""
		if !d.view.Announced {
			d.view.Reason = withdrawn
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y vipDecision) int { return x.ann.Prefix.Addr().Compare(y.ann.Prefix.Addr()) })
	return out
}

// servicesTranslatingTo are the fullnat services whose fullnat_source is a.
func servicesTranslatingTo(cfg *config.Config, a netip.Addr) []string {
	var names []string
	for _, s := range cfg.Services {
		if s.Mode == config.ModeFullNAT && s.FullNATSource.Unmap() == a {
			names = append(names, s.Name)
		}
	}
	return names
}
