package importer

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
)

// nftlbFarm is the part of an nftlb farm that converts; the rest is read key by key.
type nftlbFarm struct {
	Name       string `json:"name"`
	Addr       string `json:"virtual-addr"`
	Ports      string `json:"virtual-ports"`
	Protocol   string `json:"protocol"`
	Mode       string `json:"mode"`
	Scheduler  string `json:"scheduler"`
	SchedParam string `json:"sched-param"`
	Persist    string `json:"persistence"`
	PersistTTL string `json:"persist-ttl"`
	Helper     string `json:"helper"`
	// NewRateLimit, NewRateBurst and ConnLimit are per client address; Verdict is what
	// nftlb does with a client over them or matched by a policy.
	NewRateLimit string `json:"new-rtlimit"`
	NewRateBurst string `json:"new-rtlimit-burst"`
	ConnLimit    string `json:"est-connlimit"`
	Verdict      string `json:"verdict"`
	State        string `json:"state"`
	Backends     []nftlbBackend
}

// nftlbBackend is one backend of a farm, at its line.
type nftlbBackend struct {
	Name      string `json:"name"`
	Addr      string `json:"ip-addr"`
	Port      string `json:"port"`
	Weight    string `json:"weight"`
	Priority  string `json:"priority"`
	ConnLimit string `json:"est-connlimit"`
	State     string `json:"state"`
	Mark      string `json:"mark"`
	line      int
}

// nftlbDropped are farm keys with no Sluice equivalent, and why.
var nftlbDropped = map[string]string{
	"log":        "Sluice logs events, not packets",
	"log-prefix": "Sluice logs events, not packets", "mark": "Sluice does not mark packets",
	"priority": "Sluice's rules have one priority", "iface": "list interfaces in the config's interfaces",
	"oface": "Sluice routes by the kernel's table", "ether-addr": "Sluice resolves neighbours itself",
	"source-addr": "fullnat picks the source address from the route", "tcp-strict": "conntrack checks TCP state",
	"flow-offload": "not supported", "queue": "Sluice sends no packet to user space",
	"rst-rtlimit": "Sluice does not limit TCP resets", "rst-rtlimit-burst": "Sluice does not limit TCP resets",
	"limits-ttl":               "Sluice keeps a client's rate in an LRU, not for a fixed time",
	"est-connlimit-log-prefix": "Sluice logs events, not packets", "new-rtlimit-log-prefix": "Sluice logs events, not packets",
	"rst-rtlimit-log-prefix": "Sluice logs events, not packets", "log-rtlimit": "Sluice logs events, not packets",
	"intra-connect": "not supported",
	"responsettl":   "not supported", "virtual-addr6": "not supported",
	"sessions": "Sluice learns persistence from the flows",
}

// nftlbState are keys of nftlb's own dumps that configure nothing: counters and commands.
var nftlbState = []string{"counter-packets", "counter-bytes", "action", "newname", "used", "expiration"}

// nftlbKnown are the other keys nftlb reads (include/config.h); it ignores the rest.
var nftlbKnown = []string{"fqdn", "iether-addr", "oether-addr", "ports", "type", "timeout", "elements", "data", "time", "client", "backend", "addresses", "route"}

// nftlbOff are the values of dropped keys that mean "off" or nftlb's default, which its
// dumps write out.
var nftlbOff = []string{"", "0", "0x0", "none", "off"}

// nftlbDrop notes a farm key the converter does not read: dropped with the reason, or ignored
// as nftlb ignores it; a value that means "off" is dropped without a note.
func nftlbDrop(key, value string, note func(string, ...any)) {
	switch why, dropped := nftlbDropped[key]; {
	case slices.Contains(nftlbConverted, key), slices.Contains(nftlbState, key):
	case dropped:
		if !slices.Contains(nftlbOff, value) && (key != "priority" || value != "1") {
			note("%s %s: dropped, %s.", plain(key), plain(value), why)
		}
	case slices.Contains(nftlbKnown, key):
		note("%s %s: dropped, Sluice has no equivalent.", plain(key), plain(value))
	default:
		note("%s: ignored, as nftlb ignores it (not one of its keys).", plain(key))
	}
}

// nftlbConverted are the farm keys the converter reads (family: the addresses tell it).
var nftlbConverted = []string{"name", "family", "virtual-addr", "virtual-ports", "protocol", "mode", "scheduler", "sched-param", "persistence", "persist-ttl", "helper", "state", "backends", "new-rtlimit", "new-rtlimit-burst", "est-connlimit", "verdict", "policies"}

// Nftlb converts an nftlb JSON config ({"farms": [...]}) into services: one per farm and
// protocol, with the farm's virtual-ports. It reads the JSON as nftlb does: a repeated key
// takes its last value (with a warning), numbers may be strings. With opts.Partial a farm or a
// policy it cannot convert is left out.
func Nftlb(path string, opts Options) (*Result, error) {
	if opts.FwmarkRules != "" {
		return nil, errors.New("--fwmark-rules is for keepalived and ipvsadm: an nftlb farm names its ports")
	}
	data, err := boundedread.File(path, boundedread.ImportBytes)
	if err != nil {
		return nil, err
	}
	doc, warnings, err := parseJSON(path, data)
	if err != nil {
		return nil, err
	}
	if doc.kind != jsonObject {
		return nil, &Error{path, doc.line, "not an nftlb config: an object with the farms, not " + doc.what()}
	}
	res := &Result{Source: "nftlb " + path, Notes: warnings, Warnings: warnings}
	c := &nftlbConverter{file: path, names: namer{}, policy: map[string]*nftlbPolicy{}, brokenPolicy: map[string]int{}}
	if opts.Partial {
		c.partial = res
	}
	// Farms name the policies, which may come after them.
	if policies := doc.get("policies"); policies != nil {
		if c.policies(policies); c.fatal != nil {
			return nil, c.fatal
		}
	}
	for i, key := range doc.keys {
		value := doc.items[i]
		switch key {
		case "farms":
			if value.kind != jsonArray {
				c.errs.add(path, value.line, "farms is %s: nftlb takes an array of farms", value.what())
				continue
			}
			for _, farm := range value.items {
				before := c.errs.count()
				services := c.farm(farm)
				if c.fatal == nil && c.errs.count() > before && opts.Partial {
					c.fatal = res.leaveOut(&c.errs, before, pos{path, farm.line})
					services = nil
				}
				if c.fatal != nil {
					return nil, c.fatal
				}
				res.Services = append(res.Services, services...)
			}
		case "policies":
		default:
			res.Notes = append(res.Notes, fmt.Sprintf("%s: dropped, Sluice has no equivalent.", plain(key)))
		}
	}
	if err := c.errs.err(); err != nil {
		return nil, err
	}
	c.unusedPolicies()
	res.Notes = append(res.Notes, c.notes...)
	if err := res.finish(path, opts.Partial); err != nil {
		return nil, err
	}
	return res, nil
}

// nftlbConverter converts the farms of one nftlb file.
type nftlbConverter struct {
	file   string
	names  namer
	errs   problems
	notes  []string                // about the whole file
	policy map[string]*nftlbPolicy // by name
	out    output
	// fatal is a limit of limits.go reached, which ends the conversion.
	fatal error
	// partial is the result a partial import leaves a broken policy out of; nil refuses it.
	partial *Result
	// brokenPolicy are the lines of the policies a partial import left out, by name.
	brokenPolicy map[string]int
}

// farm converts one farm into a service per protocol and port list item.
func (c *nftlbConverter) farm(n *jsonNode) []Service {
	if n.kind != jsonObject {
		c.errs.add(c.file, n.line, "a farm is %s: nftlb takes an object", n.what())
		return nil
	}
	before := c.errs.count()
	var f nftlbFarm
	scalars(n, &f, &c.errs, c.file, "farm")
	for _, b := range c.list(n.get("backends"), "backends") {
		nb := nftlbBackend{line: b.line}
		if b.kind != jsonObject {
			c.errs.add(c.file, b.line, "a backend is %s: nftlb takes an object", b.what())
			continue
		}
		scalars(b, &nb, &c.errs, c.file, "backend")
		f.Backends = append(f.Backends, nb)
	}
	line := func(key string) int {
		if v := n.get(key); v != nil {
			return v.line
		}
		return n.line
	}
	tmpl := Service{Notes: []string{fmt.Sprintf("from nftlb farm %s (%s:%d)", plain(f.Name), c.file, n.line)}, at: pos{c.file, n.line}}
	note := func(format string, args ...any) { tmpl.Notes = append(tmpl.Notes, fmt.Sprintf(format, args...)) }
	for i, key := range n.keys {
		value := n.items[i].text
		if v := n.items[i]; v.kind == jsonArray && len(v.items) > 0 {
			value = fmt.Sprintf("(%d entries)", len(v.items))
		}
		nftlbDrop(key, value, note)
	}
	if f.State == "off" || f.State == "down" {
		c.errs.truncate(before)
		c.notes = append(c.notes, fmt.Sprintf("farm %s (line %d) is %s: not imported.", plain(f.Name), n.line, f.State))
		return nil
	}
	switch f.Mode {
	case "snat":
		tmpl.Mode = config.ModeFullNAT
	case "dnat", "":
		tmpl.Mode = config.ModeNAT
	case "dsr":
		tmpl.Mode = config.ModeDSR
	case "stlsdnat":
		tmpl.Mode = config.ModeNAT
		note("mode stlsdnat: nat; nftlb rewrites each packet without state, Sluice tracks the flows (the client and the backends see the same packets).")
	default:
		c.errs.add(c.file, line("mode"), "mode %q refused: not snat, dnat, dsr or stlsdnat", f.Mode)
	}
	c.scheduler(&f, &tmpl, line, note)
	if f.Helper != "" && f.Helper != "none" {
		c.errs.add(c.file, line("helper"), "helper %s refused: Sluice loads no conntrack helper, so the protocol's extra connections would not be balanced", f.Helper)
	}
	switch f.Persist {
	case "", "none":
	case "srcip":
		ttl, err := strconv.Atoi(cmpOr(f.PersistTTL, "60"))
		if err != nil || ttl < 1 {
			c.errs.add(c.file, line("persist-ttl"), "persist-ttl %q is not a number of seconds", f.PersistTTL)
		}
		tmpl.PersistenceTimeout = seconds(time.Duration(ttl) * time.Second)
	default:
		c.errs.add(c.file, line("persistence"), "persistence %s refused: Sluice keeps clients by source address (srcip) only", f.Persist)
	}
	c.backends(&f, &tmpl, note)
	c.limits(&f, &tmpl, line, note)
	if f.Verdict != "" && !strings.Contains(f.Verdict, "drop") && (tmpl.Limits != nil || n.get("policies") != nil) {
		c.errs.add(c.file, line("verdict"), "verdict %s refused: nftlb lets in what its limits and policies match, Sluice drops it", f.Verdict)
	}
	if c.errs.count() > before {
		return nil
	}
	return c.expand(n, &f, tmpl, line)
}

// scheduler maps nftlb's scheduler and sched-param.
func (c *nftlbConverter) scheduler(f *nftlbFarm, tmpl *Service, line func(string) int, note func(string, ...any)) {
	switch f.Scheduler {
	case "weight", "":
		tmpl.Scheduler = config.SchedulerWRR
		note("scheduler weight: nftlb picks at random by weight; Sluice's wrr gives the same shares in turn.")
	case "rr":
		tmpl.Scheduler = config.SchedulerRR
	case "hash", "symhash":
		switch strings.Join(strings.Fields(cmpOr(f.SchedParam, "srcip")), " ") {
		case "srcip":
			tmpl.Scheduler = config.SchedulerSH
		case "srcip srcport":
			tmpl.Scheduler, tmpl.SHPort = config.SchedulerSH, true
		default:
			tmpl.Scheduler = config.SchedulerHash
			note("scheduler %s by %s: Sluice's hash takes the whole 5-tuple.", f.Scheduler, shown(f.SchedParam))
		}
		if f.Scheduler == "symhash" {
			note("symhash: Sluice tracks each flow, so both directions already reach one backend.")
		}
	default:
		c.errs.add(c.file, line("scheduler"), "scheduler %q refused: not weight, rr, hash or symhash", f.Scheduler)
	}
}

// backends converts a farm's backends; of two priority levels the higher one become sorry
// servers (nftlb only sends to them while no backend of the lower level is up).
func (c *nftlbConverter) backends(f *nftlbFarm, tmpl *Service, note func(string, ...any)) {
	var levels []int
	for _, b := range f.Backends {
		p, _ := strconv.Atoi(cmpOr(b.Priority, "1"))
		if !slices.Contains(levels, p) {
			levels = append(levels, p)
		}
	}
	slices.Sort(levels)
	if len(levels) > 2 {
		c.errs.add(c.file, f.Backends[0].line, "backends have %d priority levels refused: Sluice has backends and one level of sorry servers", len(levels))
		return
	}
	seen := map[netip.AddrPort]int{}
	for _, nb := range f.Backends {
		addr, err := parseAddr(nb.Addr)
		if err != nil {
			c.errs.add(c.file, nb.line, "backend %s: %v", nb.Name, err)
			continue
		}
		b := config.Backend{Address: config.IPFrom(addr)}
		if nb.Port != "" {
			if b.Port, err = parsePort(nb.Port); err != nil {
				c.errs.add(c.file, nb.line, "backend %s port: %v", nb.Name, err)
			}
		}
		if nb.Weight != "" {
			w, err := strconv.Atoi(nb.Weight)
			if err != nil || w < 0 || w > config.MaxWeight {
				c.errs.add(c.file, nb.line, "backend %s weight %q is not from 0 to %d", nb.Name, nb.Weight, config.MaxWeight)
			}
			if w != 1 {
				b.Weight = &w
			}
		}
		if nb.State != "" && nb.State != "up" {
			b.Weight = new(int)
			note("backend %s is %s: weight 0 (takes no new flows).", plain(nb.Name), plain(nb.State))
		}
		if nb.ConnLimit != "" && nb.ConnLimit != "0" {
			if b.MaxConnections, err = strconv.Atoi(nb.ConnLimit); err != nil || b.MaxConnections < 0 || b.MaxConnections > config.MaxConnectionThreshold {
				c.errs.add(c.file, nb.line, "backend %s est-connlimit %q is not from 0 to %d", nb.Name, nb.ConnLimit, config.MaxConnectionThreshold)
			}
		}
		if !slices.Contains(nftlbOff, nb.Mark) {
			note("backend %s mark %s: dropped, Sluice does not mark packets.", plain(nb.Name), plain(nb.Mark))
		}
		if tmpl.Mode == config.ModeDSR {
			b.Port = 0
		}
		key := netip.AddrPortFrom(b.Address.Addr, uint16(b.Port))
		if first, dup := seen[key]; dup {
			c.errs.add(c.file, nb.line, "backend %s %s is already the backend at line %d: the backends of a farm are distinct destinations", plain(nb.Name), b.Address, first)
			continue
		}
		seen[key] = nb.line
		at := pos{c.file, nb.line}
		p, _ := strconv.Atoi(cmpOr(nb.Priority, "1"))
		if len(levels) == 2 && p == levels[1] {
			b.MaxConnections = 0
			tmpl.SorryServers = append(tmpl.SorryServers, b)
			tmpl.sorryAt = append(tmpl.sorryAt, at)
			tmpl.Fallback = config.FallbackSorry
			continue
		}
		tmpl.Backends = append(tmpl.Backends, b)
		tmpl.backendAt = append(tmpl.backendAt, at)
	}
	if len(levels) == 2 {
		note("backends of priority %d are sorry servers: they take new flows while no backend of priority %d is up.", levels[1], levels[0])
	}
	if len(f.Backends) == 0 {
		tmpl.Fallback = config.FallbackDrop
	}
}

// list is the elements of an array value (what names it for an error), nil when n is absent.
func (c *nftlbConverter) list(n *jsonNode, what string) []*jsonNode {
	switch {
	case n == nil || n.kind == jsonNull:
		return nil
	case n.kind != jsonArray:
		c.errs.add(c.file, n.line, "%s is %s: nftlb takes an array", what, n.what())
		return nil
	}
	return n.items
}

// expand makes a service per protocol ("all" is tcp and udp), with the farm's virtual-ports.
func (c *nftlbConverter) expand(n *jsonNode, f *nftlbFarm, tmpl Service, line func(string) int) []Service {
	vip, err := parseAddr(f.Addr)
	if err != nil {
		c.errs.add(c.file, line("virtual-addr"), "virtual-addr: %v", err)
		return nil
	}
	before := c.errs.count()
	c.farmPolicies(n, f.Name, vip, &tmpl)
	if c.errs.count() > before {
		return nil
	}
	var protos []config.Protocol
	switch cmpOr(f.Protocol, "tcp") {
	case "tcp", "udp":
		protos = []config.Protocol{config.Protocol(cmpOr(f.Protocol, "tcp"))}
	case "all":
		protos = []config.Protocol{config.ProtocolTCP, config.ProtocolUDP}
	default:
		c.errs.add(c.file, line("protocol"), "protocol %s refused: Sluice balances tcp and udp", f.Protocol)
		return nil
	}
	ports := c.ports(f, line)
	if ports == nil {
		return nil
	}
	if r := slices.IndexFunc(ports, config.Range.IsRange); r >= 0 && tmpl.Mode != config.ModeDSR {
		for _, b := range tmpl.Backends {
			if b.Port != 0 {
				c.errs.add(c.file, f.Backends[0].line, "backend port %d with virtual-ports %s refused: Sluice keeps the client's port for a range", b.Port, ports[r])
				return nil
			}
		}
	}
	if len(protos) > 1 && !tmpl.PersistenceTimeout.IsZero() {
		tmpl.Notes = append(tmpl.Notes, "protocol all: a service per protocol; nftlb's persistence spans both, Sluice keeps it per service.")
	}
	var out []Service
	for _, proto := range protos {
		if err := c.out.take(pos{c.file, n.line}, 1, len(tmpl.Backends)+len(tmpl.SorryServers)); err != nil {
			c.fatal = err
			return nil
		}
		s := tmpl
		s.Notes = slices.Clone(tmpl.Notes)
		s.VIP, s.Protocol = config.IPFrom(vip), proto
		s.SetPorts(ports)
		s.Backends, s.SorryServers = slices.Clone(tmpl.Backends), slices.Clone(tmpl.SorryServers)
		s.Name = c.names.name(proto, s.VIP, ports)
		out = append(out, s)
	}
	return out
}

// ports reads a farm's virtual-ports: ports and ranges, one service's (every port when
// empty); nil when refused.
func (c *nftlbConverter) ports(f *nftlbFarm, line func(string) int) config.PortList {
	if strings.TrimSpace(f.Ports) == "" {
		return config.PortList{{First: 1, Last: 65535}}
	}
	var ports config.PortList
	for _, item := range strings.Split(f.Ports, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		r, err := config.ParseRange(item)
		if err != nil || r.First < 1 || r.Last > 65535 || r.First > r.Last {
			c.errs.add(c.file, line("virtual-ports"), "virtual-ports %s: %s is not a port or a range first-last", shown(f.Ports), shown(item))
			return nil
		}
		if ports.Overlaps(config.PortList{r}) {
			c.errs.add(c.file, line("virtual-ports"), "virtual-ports %s: %s is listed twice: a port is one service's", shown(f.Ports), shown(item))
			return nil
		}
		ports = append(ports, r)
	}
	if len(ports) == 0 {
		c.errs.add(c.file, line("virtual-ports"), "virtual-ports %s lists no port", shown(f.Ports))
	}
	return ports
}
