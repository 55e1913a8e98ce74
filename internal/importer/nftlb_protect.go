package importer

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
)

// nftlbPolicy is one of nftlb's named client lists, which farms attach by name.
type nftlbPolicy struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	prefixes []netip.Prefix
	line     int
	used     bool
}

// nftlbPolicyKeys are the policy keys the converter reads; others are noted as dropped.
var nftlbPolicyKeys = []string{"name", "type", "family", "elements"}

// policies reads the file's policies by name, checking their elements; a partial import
// leaves a broken policy out (and the farms that attach it).
func (c *nftlbConverter) policies(list *jsonNode) {
	for _, n := range c.list(list, "policies") {
		before := c.errs.count()
		name := c.policy1(n)
		if c.partial != nil && c.errs.count() > before && c.fatal == nil {
			c.fatal = c.partial.leaveOut(&c.errs, before, pos{c.file, n.line})
			delete(c.policy, name)
			c.brokenPolicy[name] = n.line
		}
	}
}

// policy1 reads one policy, returning the name it has (when it has one).
func (c *nftlbConverter) policy1(n *jsonNode) string {
	p := &nftlbPolicy{line: n.line}
	if n.kind != jsonObject {
		c.errs.add(c.file, n.line, "a policy is %s: nftlb takes an object", n.what())
		return ""
	}
	before := c.errs.count()
	scalars(n, p, &c.errs, c.file, "policy")
	if c.errs.count() > before {
		return p.Name
	}
	if p.Type != "blacklist" && p.Type != "whitelist" {
		c.errs.add(c.file, n.line, "policy %s type %q refused: not blacklist or whitelist", p.Name, p.Type)
		return p.Name
	}
	for i, key := range n.keys {
		if value := n.items[i].text; !slices.Contains(nftlbPolicyKeys, key) && value != "" {
			c.notes = append(c.notes, fmt.Sprintf("policy %s %s %s: dropped, Sluice has no equivalent.", plain(p.Name), plain(key), plain(value)))
		}
	}
	for _, e := range c.list(n.get("elements"), "policy "+p.Name+" elements") {
		data := ""
		if v := e.get("data"); v != nil {
			data = v.text
		}
		prefix, note, err := nftlbPrefix(data)
		if err != nil {
			c.errs.add(c.file, e.line, "policy %s element: %v", p.Name, err)
			continue
		}
		if note != "" {
			c.notes = append(c.notes, fmt.Sprintf("policy %s: %s", plain(p.Name), note))
		}
		p.prefixes = append(p.prefixes, prefix)
	}
	if c.policy[p.Name] != nil {
		c.errs.add(c.file, n.line, "policy %s is defined twice (first at line %d)", p.Name, c.policy[p.Name].line)
		return p.Name
	}
	c.policy[p.Name] = p
	return p.Name
}

// nftlbPrefix reads a policy element: an address or a prefix. nft masks a prefix's host
// bits (192.0.2.7/24 is 192.0.2.0/24): the note says so when it does.
func nftlbPrefix(data string) (netip.Prefix, string, error) {
	note := ""
	if p, err := netip.ParsePrefix(data); err == nil && p.Masked() != p {
		note = fmt.Sprintf("element %s is %s (nft masks the host bits).", data, p.Masked())
		data = p.Masked().String()
	}
	p, err := config.ParseSourcePrefix(data)
	return p, note, err
}

// unusedPolicies notes the policies no imported farm attaches, in the file's order.
func (c *nftlbConverter) unusedPolicies() {
	var unused []*nftlbPolicy
	for _, p := range c.policy {
		if !p.used {
			unused = append(unused, p)
		}
	}
	slices.SortFunc(unused, func(a, b *nftlbPolicy) int { return a.line - b.line })
	for _, p := range unused {
		c.notes = append(c.notes, fmt.Sprintf("policy %s (line %d) is attached to no imported farm: not imported.", plain(p.Name), p.line))
	}
}

// farmPolicies maps the policies a farm attaches: blacklists to source_deny, a whitelist to
// source_allow, both with the prefixes of the VIP's family only (the others cannot match its
// clients). A whitelist left empty is refused: nftlb lets no client in, source_allow: [] all.
func (c *nftlbConverter) farmPolicies(n *jsonNode, farm string, vip netip.Addr, tmpl *Service) {
	var whitelist *nftlbPolicy
	for _, ref := range c.list(n.get("policies"), "farm "+farm+" policies") {
		name := ""
		if v := ref.get("name"); v != nil {
			name = v.text
		}
		p := c.policy[name]
		if line, broken := c.brokenPolicy[name]; broken {
			c.errs.add(c.file, ref.line, "farm %s attaches policy %s, left out at line %d", farm, name, line)
			continue
		}
		if p == nil {
			c.errs.add(c.file, ref.line, "farm %s policy %q is not defined in the file's policies", farm, name)
			continue
		}
		p.used = true
		var kept []config.Prefix
		for _, prefix := range p.prefixes {
			if prefix.Addr().Is6() == vip.Is6() {
				kept = append(kept, config.PrefixFrom(prefix))
			}
		}
		if dropped := len(p.prefixes) - len(kept); dropped > 0 {
			tmpl.Notes = append(tmpl.Notes, fmt.Sprintf("policy %s: dropped %d element(s) of the other address family (they cannot match this VIP's clients).", plain(p.Name), dropped))
		}
		if p.Type == "blacklist" {
			tmpl.SourceDeny = append(tmpl.SourceDeny, kept...)
			continue
		}
		switch {
		case whitelist != nil:
			c.errs.add(c.file, ref.line, "farm %s whitelists %s and %s refused: Sluice's source_allow is one list (merge them into one policy)", farm, whitelist.Name, p.Name)
		case len(kept) == 0:
			c.errs.add(c.file, ref.line, "farm %s whitelist %s has no element for %s refused: nftlb lets no client in, an empty source_allow lets all in", farm, p.Name, vip)
		}
		whitelist = p
		tmpl.SourceAllow = kept
	}
}

// nftlbRateUnits are the seconds of the units a new-rtlimit may name.
var nftlbRateUnits = map[string]int{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}

// limits maps a farm's new-rtlimit and est-connlimit, which nftlb keys by client address
// (meters on ip saddr), to the per-source limits; over them nftlb drops, Sluice's default.
func (c *nftlbConverter) limits(f *nftlbFarm, tmpl *Service, line func(string) int, note func(string, ...any)) {
	var l config.Limits
	if f.NewRateLimit != "" && f.NewRateLimit != "0" {
		rate, err := nftlbRate(f.NewRateLimit)
		if err != nil {
			c.errs.add(c.file, line("new-rtlimit"), "new-rtlimit: %v", err)
		}
		l.NewConnectionsPerSourcePerSecond = rate
		if _, unit, ok := strings.Cut(f.NewRateLimit, "/"); ok && unit != "second" {
			note("new-rtlimit %s: %d a second (rounded up: Sluice's rates are whole connections a second).", plain(f.NewRateLimit), rate)
		}
		if f.NewRateBurst != "" && f.NewRateBurst != "0" && f.NewRateBurst != strconv.Itoa(rate) {
			note("new-rtlimit-burst %s: dropped, Sluice's burst is a second's worth (%d).", plain(f.NewRateBurst), rate)
		}
	}
	if f.ConnLimit != "" && f.ConnLimit != "0" {
		n, err := strconv.Atoi(f.ConnLimit)
		if err != nil || n < 1 {
			c.errs.add(c.file, line("est-connlimit"), "est-connlimit %q is not a number of connections", f.ConnLimit)
		}
		if tmpl.Mode == config.ModeDSR {
			c.errs.add(c.file, line("est-connlimit"), "est-connlimit on a dsr farm refused: nft's dsr has no conntrack to count connections; dropping the limit would let a client's flood in (use snat or dnat, or write the config for datapath ebpf)")
		}
		l.ConnectionsPerSource = n
	}
	if l != (config.Limits{}) {
		tmpl.Limits = &l
	}
}

// nftlbRate reads "N" or "N/unit" as connections a second, rounded up.
func nftlbRate(text string) (int, error) {
	count, unit, _ := strings.Cut(text, "/")
	seconds, ok := nftlbRateUnits[cmpOr(unit, "second")]
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 || !ok {
		return 0, fmt.Errorf("%q is not a number of connections a second, minute, hour, day or week", text)
	}
	return (n + seconds - 1) / seconds, nil
}
