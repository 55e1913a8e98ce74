package importer

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// Keepalived defaults that a faithful conversion writes out where Sluice's differ.
const (
	kaDelayLoop      = 60 * time.Second
	kaConnectTimeout = 5 * time.Second
	// maxGroupRange bounds the addresses one virtual_server_group range expands to.
	maxGroupRange = 256
)

// kaStatusDefault is what keepalived's HTTP_GET accepts without a status_code: 2xx.
var kaStatusDefault = []config.Range{{First: 200, Last: 299}}

// Keepalived converts a keepalived.conf, and the files it includes, into services: one per
// virtual_server, or per address and protocol of the virtual_server_group members or the
// firewall mark (by opts.FwmarkRules) it names, with their ports; with opts.Partial a
// virtual_server it cannot convert is left out.
func Keepalived(path string, opts Options) (*Result, error) {
	toks, err := lexKeepalived(path)
	if err != nil {
		return nil, err
	}
	top, err := parseStatements(toks)
	if err != nil {
		return nil, err
	}
	rules, err := readMarkRules(opts.FwmarkRules)
	if err != nil {
		return nil, err
	}
	c := &kaConverter{names: namer{}, groups: map[string]*stmt{}, rules: rules}
	res := &Result{Source: "keepalived " + path + opts.rulesSource()}
	var skipped []string
	for _, s := range top {
		switch s.key() {
		case "virtual_server_group":
			if len(s.words) == 2 {
				c.groups[s.words[1].text] = s
			}
		case "virtual_server":
		default:
			if !c.keyword(s) {
				continue
			}
			if !slices.Contains(skipped, s.key()) {
				skipped = append(skipped, s.key())
			}
		}
	}
	if len(skipped) > 0 {
		res.Notes = append(res.Notes, "skipped "+strings.Join(skipped, ", ")+": VRRP and addresses stay with keepalived (see docs/ha.md).")
	}
	for _, s := range top {
		if s.key() != "virtual_server" {
			continue
		}
		before := c.errs.count()
		services, err := c.virtualServer(s)
		if err != nil {
			return nil, err
		}
		if opts.Partial && c.errs.count() > before {
			if err := res.leaveOut(&c.errs, before, pos{s.file(), s.line()}); err != nil {
				return nil, err
			}
			continue
		}
		res.Services = append(res.Services, services...)
	}
	if err := c.errs.err(); err != nil {
		return nil, err
	}
	if err := res.finish(path, opts.Partial); err != nil {
		return nil, err
	}
	return res, nil
}

// kaKeyword is what a keepalived keyword looks like; a line of another kind of file
// (/etc/shadow: root:$6$...) does not.
var kaKeyword = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// kaMember is what the address or range of a virtual_server_group member looks like.
var kaMember = regexp.MustCompile(`^[0-9A-Fa-f.:\[\]-]{1,64}$`)

// keyword tells whether a statement starts with a keyword, refusing it without showing it
// when it does not: the file is not a keepalived config, and what it holds stays out of errors
// and output.
func (c *kaConverter) keyword(s *stmt) bool {
	if kaKeyword.MatchString(s.key()) {
		return true
	}
	c.fail(s, "not a keepalived keyword: this file is not a keepalived config (its lines are not shown; $VARIABLES and @conditionals are not expanded)")
	return false
}

// statement writes a statement Sluice drops for a note: its keyword and values, each value
// shown only when short and printable.
func statement(s *stmt) string {
	words := []string{s.key()}
	for _, a := range s.args() {
		words = append(words, plain(a))
	}
	return strings.Join(words, " ")
}

// kaConverter converts the virtual servers of one keepalived config.
type kaConverter struct {
	names namer
	// rules are the --fwmark-rules, nil without.
	rules  *markRules
	groups map[string]*stmt
	errs   problems
	out    output
	// addresses counts what virtual_server_group members expanded to, over every use.
	addresses int
}

func (c *kaConverter) fail(s *stmt, format string, args ...any) {
	c.errs.add(s.file(), s.line(), format, args...)
}

// listener is one VIP and its ports a virtual server takes.
type listener struct {
	vip netip.Addr
	// proto is the protocol a firewall mark's rules name, "" for the virtual server's.
	proto config.Protocol
	ports config.PortList
	// at is the line that names it: a virtual_server's, a group member's, or a mark's rule.
	at pos
	// fwmark is the mark it stands for, 0 for none.
	fwmark uint32
}

// virtualServer converts a virtual_server block into a service per VIP and protocol (its
// listeners' ports joined); the error is a limit of limits.go, which ends the conversion.
func (c *kaConverter) virtualServer(s *stmt) ([]Service, error) {
	listeners, origin, err := c.listeners(s)
	if listeners == nil || err != nil {
		return nil, err
	}
	tmpl, ok := c.serviceOptions(s)
	if !ok {
		return nil, nil
	}
	merged, ok := c.merge(listeners, tmpl.Protocol.OrDefault())
	if !ok {
		return nil, nil
	}
	var out []Service
	for _, l := range merged {
		if err := c.out.take(pos{s.file(), s.line()}, 1, len(tmpl.Backends)+len(tmpl.SorryServers)); err != nil {
			return nil, err
		}
		svc := Service{Service: tmpl.Service, Notes: append([]string{fmt.Sprintf("from %s (%s:%d)", origin, s.file(), s.line())}, tmpl.Notes...)}
		svc.Notes = append(svc.Notes, l.notes(merged, tmpl.PersistenceTimeout.IsZero())...)
		svc.at, svc.backendAt, svc.sorryAt = pos{s.file(), s.line()}, tmpl.backendAt, tmpl.sorryAt
		svc.VIP = config.IPFrom(l.vip)
		if l.proto != svc.Protocol.OrDefault() {
			svc.Protocol = l.proto
		}
		svc.SetPorts(l.ports)
		svc.Name = c.names.name(svc.Protocol, svc.VIP, l.ports)
		svc.Backends = slices.Clone(tmpl.Backends)
		for i := range svc.Backends {
			c.checkFamily(s, svc.Backends[i].Address, l.vip)
		}
		out = append(out, svc)
	}
	return out, nil
}

// mergedListener is the listeners of one VIP and protocol, joined into one service.
type mergedListener struct {
	listener
	// from are the listeners joined, in the order written.
	from []listener
}

// merge joins the listeners of one VIP and protocol (proto for those without their own),
// in the order written, into one with their ports; ok is false when one names a port another
// did (refused at its line).
func (c *kaConverter) merge(ls []listener, proto config.Protocol) ([]mergedListener, bool) {
	type key struct {
		vip   netip.Addr
		proto config.Protocol
	}
	var out []mergedListener
	index := map[key]int{}
	ok := true
	for _, l := range ls {
		l.proto = cmp.Or(l.proto, proto)
		i, seen := index[key{l.vip, l.proto}]
		if !seen {
			index[key{l.vip, l.proto}] = len(out)
			out = append(out, mergedListener{listener: l, from: []listener{l}})
			continue
		}
		m := &out[i]
		if len(m.ports)+len(l.ports) > config.MaxPortRanges {
			c.errs.add(l.at.file, l.at.line, "%s %s: more than %d ports, the most a Sluice service lists: list the others in another virtual_server_group", l.proto, l.vip, config.MaxPortRanges)
			return nil, false
		}
		if j := slices.IndexFunc(m.from, func(o listener) bool { return o.ports.Overlaps(l.ports) }); j >= 0 {
			o := m.from[j]
			c.errs.add(l.at.file, l.at.line, "%s %s port %s is already at %s:%d: a port of an address is one service's", l.proto, l.vip, l.ports, o.at.file, o.at.line)
			ok = false
			continue
		}
		m.ports = append(slices.Clone(m.ports), l.ports...)
		m.from = append(m.from, l)
	}
	return out, ok
}

// notes say where a joined service's ports come from and how persistence changes: within a
// service it spans the ports, while IPVS kept it per group member and shared it over a mark's
// VIPs and protocols.
func (m mergedListener) notes(all []mergedListener, noPersistence bool) []string {
	var notes []string
	for _, l := range m.from {
		if l.fwmark != 0 {
			notes = append(notes, fwmarkNote(l))
		}
	}
	if len(m.from) > 1 && !noPersistence && slices.ContainsFunc(m.from, func(l listener) bool { return l.fwmark == 0 }) {
		notes = append(notes, fmt.Sprintf("the group's members at %s %s are one service with ports %s: its persistence spans them (IPVS kept it per member).", m.proto, m.vip, m.ports))
	}
	var marks []uint32
	for _, l := range m.from {
		if l.fwmark != 0 && !slices.Contains(marks, l.fwmark) {
			marks = append(marks, l.fwmark)
		}
	}
	for _, mark := range marks {
		n := 0
		for _, o := range all {
			if slices.ContainsFunc(o.from, func(l listener) bool { return l.fwmark == mark }) {
				n++
			}
		}
		if n > 1 {
			notes = append(notes, sharedMarkNote(mark, n))
		}
	}
	return notes
}

func (c *kaConverter) checkFamily(s *stmt, addr config.IP, vip netip.Addr) {
	if addr.IsValid() && addr.Is4() != vip.Is4() {
		c.fail(s, "real server %s and VIP %s are of different address families", addr, vip)
	}
}

// listeners are the VIPs and ports of a virtual_server: its own, its group's members, or its
// mark's rules; the error is a group expanding beyond MaxGroupAddresses.
func (c *kaConverter) listeners(s *stmt) ([]listener, string, error) {
	args := s.args()
	switch {
	case len(args) == 2 && args[0] == "fwmark":
		ls, err := c.rules.listeners(args[1])
		if err != nil {
			c.fail(s, "virtual_server fwmark %s refused: %v", args[1], err)
		}
		return ls, "virtual_server fwmark " + args[1], nil
	case len(args) == 2 && args[0] == "group":
		g, ok := c.groups[args[1]]
		if !ok {
			c.fail(s, "virtual_server group %s: no virtual_server_group %s", args[1], args[1])
			return nil, "", nil
		}
		var out []listener
		for _, m := range g.block {
			members := c.groupMember(m)
			if c.addresses += len(members); c.addresses > MaxGroupAddresses {
				return nil, "", &Error{s.file(), s.line(), fmt.Sprintf("virtual_server group %s: the groups' ranges expand to more than %d addresses in all, the most an import makes: list fewer addresses, or import the config in parts", args[1], MaxGroupAddresses)}
			}
			out = append(out, members...)
		}
		return out, "virtual_server group " + args[1], nil
	case len(args) == 2:
		vip, err := parseAddr(args[0])
		port, perr := parsePort(args[1])
		switch {
		case err != nil:
			c.fail(s, "virtual_server: %v", err)
		case perr != nil || port == 0:
			c.fail(s, "virtual_server: %s is not a port from 1 to 65535", shown(args[1]))
		default:
			return []listener{{vip: vip, ports: onePort(port), at: pos{s.file(), s.line()}}}, "virtual_server " + args[0] + " " + args[1], nil
		}
	default:
		c.fail(s, "virtual_server needs an IP and a port, group NAME, or fwmark N")
	}
	return nil, "", nil
}

// onePort is the port list of one port.
func onePort(port int) config.PortList { return config.PortList{{First: port, Last: port}} }

// groupMember expands one line of a virtual_server_group: IP PORT, a range like 10.0.0.1-5
// PORT (the last IPv4 byte, or the last IPv6 group in hex), or fwmark N.
func (c *kaConverter) groupMember(m *stmt) []listener {
	words := append([]string{m.key()}, m.args()...)
	if words[0] == "fwmark" && len(words) == 2 {
		ls, err := c.rules.listeners(words[1])
		if err != nil {
			c.fail(m, "virtual_server_group member fwmark %s refused: %v", words[1], err)
		}
		return ls
	}
	if !kaMember.MatchString(words[0]) {
		c.fail(m, "virtual_server_group member: not an address or a range: this file is not a keepalived config (its lines are not shown)")
		return nil
	}
	if len(words) != 2 {
		c.fail(m, "virtual_server_group member needs an IP (or range) and a port")
		return nil
	}
	port, err := parsePort(words[1])
	if err != nil || port == 0 {
		c.fail(m, "virtual_server_group member: %s is not a port from 1 to 65535", shown(words[1]))
		return nil
	}
	first, last, err := addrRange(words[0])
	if err != nil {
		c.fail(m, "virtual_server_group member: %v", err)
		return nil
	}
	var out []listener
	for a := first; ; a = a.Next() {
		out = append(out, listener{vip: a, ports: onePort(port), at: pos{m.file(), m.line()}})
		if a == last {
			return out
		}
	}
}

// addrRange parses an address or a keepalived range: 10.0.0.1-5, fd00::a-1f.
func addrRange(text string) (netip.Addr, netip.Addr, error) {
	base, end, isRange := strings.Cut(text, "-")
	first, err := parseAddr(base)
	if err != nil || !isRange {
		return first, first, err
	}
	b := first.AsSlice()
	var lastPart uint64
	if first.Is4() {
		lastPart, err = strconv.ParseUint(end, 10, 8)
		b[3] = byte(lastPart)
	} else {
		lastPart, err = strconv.ParseUint(end, 16, 16)
		b[14], b[15] = byte(lastPart>>8), byte(lastPart)
	}
	last, _ := netip.AddrFromSlice(b)
	switch {
	case err != nil:
		return first, first, fmt.Errorf("%s is not a range like 10.0.0.1-5", shown(text))
	case last.Less(first):
		return first, first, fmt.Errorf("%s ends before it starts", shown(text))
	}
	n := 0
	for a := first; a != last; a = a.Next() {
		if n++; n >= maxGroupRange {
			return first, first, fmt.Errorf("%s holds more than %d addresses", shown(text), maxGroupRange)
		}
	}
	return first, last, nil
}

// checkDefaults are the checker settings a virtual_server or real_server sets for its checks.
type checkDefaults struct {
	delayLoop, connectTimeout time.Duration
	retry                     int // -1: unset
	host                      string
}

// serviceOptions converts a virtual_server's options and real servers into a template service
// (no name, VIP or port yet); ok is false when something was refused.
func (c *kaConverter) serviceOptions(vs *stmt) (Service, bool) {
	before := c.errs.count()
	var svc Service
	note := func(format string, args ...any) {
		if n := fmt.Sprintf(format, args...); !slices.Contains(svc.Notes, n) {
			svc.Notes = append(svc.Notes, n)
		}
	}
	defaults := checkDefaults{delayLoop: kaDelayLoop, connectTimeout: kaConnectTimeout, retry: -1}
	algo := ""
	var forward kaForward
	var servers []*stmt
	for _, s := range vs.block {
		if !c.keyword(s) {
			continue
		}
		args := s.args()
		if len(args) == 0 && !slices.Contains(kaFlags, s.key()) && s.key() != "real_server" {
			c.fail(s, "%s needs a value", s.key())
			continue
		}
		switch s.key() {
		case "real_server":
			servers = append(servers, s)
		case "delay_loop", "connect_timeout", "retry", "nb_get_retry", "virtualhost":
			c.checkDefault(s, &defaults)
		case "lb_algo", "lvs_sched":
			algo = args[0]
			sched, why, ok := ipvsScheduler(args[0])
			if !ok {
				c.fail(s, "lb_algo %s refused: %s", args[0], why)
			}
			if why != "" && ok {
				note("lb_algo %s: %s.", args[0], why)
			}
			svc.Scheduler = sched
		case "lb_kind", "lvs_method":
			forward = c.mode(s)
			svc.Mode, svc.Tunnel, svc.GUEPort = forward.mode, forward.tunnel, forward.guePort
			if forward.mode == config.ModeTunnel {
				note("%s: IPVS's tunnel is mode tunnel (datapath ebpf); the backends decapsulate as they did for IPVS (ip link add ... type ipip, or fou for gue) or with sluice decap attach.", statement(s))
			}
		case "protocol":
			switch strings.ToUpper(args[0]) {
			case "TCP", "UDP":
				svc.Protocol = config.Protocol(strings.ToLower(args[0]))
			default:
				c.fail(s, "protocol %s refused: Sluice balances TCP and UDP", args[0])
			}
		case "persistence_timeout":
			if n, ok := c.number(s, 0, int(config.MaxPersistenceTimeout/time.Second)); ok && n > 0 {
				svc.PersistenceTimeout = seconds(time.Duration(n) * time.Second)
			}
		case "persistence_granularity":
			if p, err := maskPrefix(args[0]); err != nil {
				c.fail(s, "persistence_granularity: %v", err)
			} else {
				svc.PersistenceGranularity = p
			}
		case "quorum":
			svc.Quorum, _ = c.number(s, 0, config.QuorumMax)
		case "hysteresis":
			svc.Hysteresis, _ = c.number(s, 0, config.QuorumMax)
		case "quorum_up", "quorum_down":
			argv, err := splitCommand(strings.Join(args, " "))
			switch {
			case err != nil:
				c.fail(s, "%s refused: %v", s.key(), err)
			case s.key() == "quorum_up":
				svc.QuorumUp = argv
			default:
				svc.QuorumDown = argv
			}
		case "sorry_server":
			if b, ok := c.server(s, "sorry_server"); ok {
				svc.SorryServers = append(svc.SorryServers, b)
				svc.sorryAt = append(svc.sorryAt, pos{s.file(), s.line()})
				svc.Fallback = config.FallbackSorry
			}
		case "sh-port", "mh-port":
			svc.SHPort = true
		case "inhibit_on_failure":
			// Established flows of a failed server keep it either way: see realServer.
		default:
			note("%s: dropped, Sluice has no equivalent.", statement(s))
		}
	}
	if algo == "" {
		note("no lb_algo: keepalived's default is wlc; Sluice's maglev spreads by weight too, without counting connections.")
	}
	if svc.SHPort && svc.Scheduler != config.SchedulerSH {
		note("sh-port/mh-port dropped: it only applies to the sh scheduler.")
		svc.SHPort = false
	}
	var checks []*config.HealthCheck
	seen := map[netip.AddrPort]*stmt{}
	for _, rs := range servers {
		b, hc, ok := c.realServer(rs, defaults, forward, note)
		if !ok {
			continue
		}
		key := netip.AddrPortFrom(b.Address.Addr, uint16(b.Port))
		if first := seen[key]; first != nil {
			c.fail(rs, "real_server %s is already at %s:%d: the backends of a service are distinct destinations", b.Address, first.file(), first.line())
			continue
		}
		seen[key] = rs
		svc.Backends = append(svc.Backends, b)
		svc.backendAt = append(svc.backendAt, pos{rs.file(), rs.line()})
		checks = append(checks, hc)
	}
	svc.HealthCheck = shareChecks(svc.Backends, checks)
	if svc.Mode.Direct() {
		for i := range svc.SorryServers {
			svc.SorryServers[i].Port = 0
		}
	}
	if len(servers) == 0 && svc.Fallback == "" {
		svc.Fallback = config.FallbackDrop
		note("no real_server: new flows are dropped.")
	}
	return svc, c.errs.count() == before
}

// shareChecks gives each backend its real server's check: the check all share becomes the
// service's; when they differ, the first server's is the service's and the others' differing
// ones are their own, unless a server has none (keepalived counts it up), which leaves the
// service without a check and each checked backend with its own.
func shareChecks(backends []config.Backend, checks []*config.HealthCheck) *config.HealthCheck {
	if len(checks) == 0 {
		return nil
	}
	shared := checks[0]
	if slices.Contains(checks, nil) {
		shared = nil
	}
	for i, hc := range checks {
		if !reflect.DeepEqual(hc, shared) {
			backends[i].HealthCheck = hc
		}
	}
	return shared
}

// kaFlags are the keywords that take no value.
var kaFlags = []string{"inhibit_on_failure", "sh-port", "mh-port", "sh-fallback", "mh-fallback", "ha_suspend", "ops", "alpha", "omega", "one_packet_scheduling", "sorry_server_inhibit", "smtp_alert", "hashed", "flag-1", "flag-2", "flag-3", "fast_recovery", "enable_sni", "tls_compliant", "misc_dynamic"}

// kaForward is a forwarding method (lb_kind, lvs_method): the mode and, for TUN, the tunnel.
type kaForward struct {
	mode    config.Mode
	tunnel  config.Tunnel // "" for ipip, Sluice's default
	guePort int
}

// mode converts an lb_kind or lvs_method: NAT, DR, and TUN with keepalived's optional
// "type ipip" or "type gue port N" (GRE and the checksum flags are refused).
func (c *kaConverter) mode(s *stmt) kaForward {
	args := s.args()
	if !strings.EqualFold(args[0], "TUN") && len(args) > 1 {
		c.fail(s, "%s %s: %q after it is not something Sluice knows", s.key(), args[0], strings.Join(args[1:], " "))
		return kaForward{}
	}
	switch strings.ToUpper(args[0]) {
	case "NAT":
		return kaForward{mode: config.ModeNAT}
	case "DR":
		return kaForward{mode: config.ModeDSR}
	case "TUN":
		return c.tunnel(s, args[1:])
	default:
		c.fail(s, "%s %s refused: not NAT, DR or TUN", s.key(), args[0])
	}
	return kaForward{}
}

// tunnel converts the words after TUN: none or "type ipip" (IPIP), "type gue port N" (GUE).
func (c *kaConverter) tunnel(s *stmt, words []string) kaForward {
	f := kaForward{mode: config.ModeTunnel}
	switch {
	case len(words) == 0, len(words) == 2 && words[0] == "type" && words[1] == "ipip":
	case len(words) == 4 && words[0] == "type" && words[1] == "gue" && words[2] == "port":
		port, err := parsePort(words[3])
		if err != nil || port == 0 {
			c.fail(s, "%s TUN type gue port %s is not a port from 1 to 65535", s.key(), words[3])
			return kaForward{}
		}
		f.tunnel, f.guePort = config.TunnelGUE, port
	default:
		c.fail(s, "%s TUN %s refused: Sluice tunnels in ipip or in gue without checksum options (type ipip, or type gue port N)", s.key(), strings.Join(words, " "))
		return kaForward{}
	}
	return f
}

// number parses the statement's value as a whole number within lo-hi.
func (c *kaConverter) number(s *stmt, lo, hi int) (int, bool) {
	n, err := strconv.Atoi(s.args()[0])
	if err != nil || n < lo || n > hi {
		c.fail(s, "%s %s is not a whole number from %d to %d", s.key(), s.args()[0], lo, hi)
		return 0, false
	}
	return n, true
}

// seconds parses a keepalived duration: seconds, with a fraction allowed.
func (c *kaConverter) seconds(s *stmt) (time.Duration, bool) {
	f, err := strconv.ParseFloat(s.args()[0], 64)
	if err != nil || f <= 0 || f > 3600 {
		c.fail(s, "%s %s is not a number of seconds up to 3600", s.key(), s.args()[0])
		return 0, false
	}
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond), true
}

// checkDefault applies a checker setting given at the virtual_server or real_server level.
func (c *kaConverter) checkDefault(s *stmt, d *checkDefaults) {
	switch s.key() {
	case "delay_loop":
		if v, ok := c.seconds(s); ok {
			d.delayLoop = v
		}
	case "connect_timeout":
		if v, ok := c.seconds(s); ok {
			d.connectTimeout = v
		}
	case "retry", "nb_get_retry":
		if n, ok := c.number(s, 0, 99); ok {
			d.retry = n
		}
	case "virtualhost":
		d.host = s.args()[0]
	}
}

// server converts "IP PORT" of a real_server or sorry_server into a backend.
func (c *kaConverter) server(s *stmt, what string) (config.Backend, bool) {
	args := s.args()
	if len(args) != 2 {
		c.fail(s, "%s needs an IP and a port", what)
		return config.Backend{}, false
	}
	addr, err := parseAddr(args[0])
	if err != nil {
		c.fail(s, "%s: %v", what, err)
		return config.Backend{}, false
	}
	port, err := parsePort(args[1])
	if err != nil {
		c.fail(s, "%s: %v", what, err)
		return config.Backend{}, false
	}
	return config.Backend{Address: config.IPFrom(addr), Port: port}, true
}

// realServer converts a real_server block into a backend and its health check.
func (c *kaConverter) realServer(rs *stmt, d checkDefaults, forward kaForward, note func(string, ...any)) (config.Backend, *config.HealthCheck, bool) {
	before := c.errs.count()
	b, ok := c.server(rs, "real_server")
	if !ok {
		return b, nil, false
	}
	if forward.mode.Direct() {
		b.Port = 0 // IPVS DR and TUN keep the packet's destination port
	}
	var checks []*stmt
	for _, s := range rs.block {
		if !c.keyword(s) {
			continue
		}
		if len(s.args()) == 0 && !slices.Contains(kaFlags, s.key()) && !isCheck(s.key()) {
			c.fail(s, "%s needs a value", s.key())
			continue
		}
		switch s.key() {
		case "weight":
			if w, ok := c.number(s, 0, config.MaxWeight); ok && w != 1 {
				b.Weight = &w
			}
		case "uthreshold":
			b.MaxConnections, _ = c.number(s, 0, config.MaxConnectionThreshold)
		case "lthreshold":
			b.MinConnections, _ = c.number(s, 0, config.MaxConnectionThreshold)
		case "inhibit_on_failure":
			// keepalived either sets a failed server's weight to 0 or removes it from IPVS; with
			// IPVS's default expire_nodest_conn=0 both keep its established connections, which is
			// Sluice's on_failure: inhibit (the default).
		case "delay_loop", "connect_timeout", "retry", "nb_get_retry", "virtualhost":
			c.checkDefault(s, &d)
		case "lvs_method":
			if c.mode(s) != forward {
				c.fail(s, "lvs_method %s differs from the virtual server's: Sluice's mode is per service", s.args()[0])
			}
		default:
			if isCheck(s.key()) {
				checks = append(checks, s)
			} else {
				note("%s of real servers: dropped, Sluice has no equivalent.", statement(s))
			}
		}
	}
	if b.MinConnections > 0 && b.MaxConnections == 0 {
		note("lthreshold without uthreshold: dropped (IPVS only uses it after uthreshold).")
		b.MinConnections = 0
	}
	var hc *config.HealthCheck
	switch len(checks) {
	case 0:
	case 1:
		hc = c.check(checks[0], d, b.Address.Addr, note)
	default:
		c.fail(checks[1], "real_server %s has several checks: Sluice has one health_check per backend", rs.args()[0])
	}
	return b, hc, c.errs.count() == before
}

func isCheck(key string) bool {
	return strings.HasSuffix(key, "_CHECK") || strings.HasSuffix(key, "_GET")
}

// check converts a checker block of the real server at addr into a health check.
func (c *kaConverter) check(cs *stmt, d checkDefaults, addr netip.Addr, note func(string, ...any)) *config.HealthCheck {
	hc := &config.HealthCheck{Rise: 1}
	var urls []*stmt
	var payload, reply, dnsName, dnsType, misc string
	hosts := 0
	for _, s := range cs.block {
		if !c.keyword(s) {
			continue
		}
		args := s.args()
		if len(args) == 0 && !slices.Contains(kaFlags, s.key()) && s.key() != "url" && s.key() != "host" {
			c.fail(s, "%s needs a value", s.key())
			continue
		}
		switch s.key() {
		case "delay_loop", "connect_timeout", "retry", "nb_get_retry", "virtualhost":
			c.checkDefault(s, &d)
		case "misc_timeout":
			if v, ok := c.seconds(s); ok {
				d.connectTimeout = v
			}
		case "connect_port":
			if p, err := parsePort(args[0]); err != nil || p == 0 {
				c.fail(s, "connect_port %s is not a port from 1 to 65535", args[0])
			} else {
				hc.Port = p
			}
		case "connect_ip":
			c.fail(s, "connect_ip refused: Sluice checks the backend's own address")
		case "url":
			urls = append(urls, s)
		case "payload":
			payload = s.args()[0]
		case "require_reply":
			reply = s.args()[0]
		case "name":
			dnsName = args[0]
		case "type":
			dnsType = args[0]
		case "misc_path":
			misc = strings.Join(args, " ")
		case "helo_name":
			hc.HELOName = args[0]
		case "host":
			if hosts++; hosts > 1 {
				c.fail(s, "SMTP_CHECK with several host blocks refused: Sluice checks the backend once")
			} else {
				c.smtpHost(s, hc, addr, note)
			}
		case "misc_dynamic":
			c.fail(s, "misc_dynamic refused: keepalived takes exit codes 2-255 as up with a weight; Sluice takes any exit code but 0 as down")
		case "delay_before_retry":
			note("delay_before_retry %s: dropped, Sluice retries at the check's interval.", args[0])
		default:
			note("%s %s: dropped, Sluice has no equivalent.", cs.key(), statement(s))
		}
	}
	hc.Interval = seconds(d.delayLoop)
	timeout := d.connectTimeout
	if timeout > d.delayLoop {
		note("connect_timeout %s is cut to delay_loop %s: a check ends before the next starts.", timeout, d.delayLoop)
		timeout = d.delayLoop
	}
	hc.Timeout = seconds(timeout)
	if d.retry >= 0 {
		hc.Fall = d.retry + 1 // keepalived retries retry times after the first failure
	}
	switch cs.key() {
	case "TCP_CHECK":
		hc.Type = config.CheckTCP
	case "HTTP_GET", "SSL_GET":
		c.httpCheck(cs, hc, urls, d.host, note)
	case "MISC_CHECK":
		hc.Type = config.CheckExec
		argv, err := splitCommand(misc)
		if err != nil {
			c.fail(cs, "MISC_CHECK misc_path refused: %v", err)
		}
		hc.Command = placeAddress(argv, addr)
	case "UDP_CHECK":
		c.udpCheck(cs, hc, payload, reply, note)
	case "SMTP_CHECK":
		hc.Type = config.CheckSMTP
	case "PING_CHECK":
		hc.Type = config.CheckICMP
		hc.Port = 0
	case "DNS_CHECK":
		c.dnsCheck(cs, hc, dnsName, dnsType)
	default:
		c.fail(cs, "%s refused: Sluice checks by tcp, http, https, udp, smtp, icmp, dns or exec (a command)", cs.key())
	}
	return hc
}

// smtpHost reads an SMTP_CHECK host block: it may name the real server's own address and a port.
func (c *kaConverter) smtpHost(hs *stmt, hc *config.HealthCheck, addr netip.Addr, note func(string, ...any)) {
	for _, s := range hs.block {
		if !c.keyword(s) {
			continue
		}
		args := s.args()
		if len(args) == 0 {
			c.fail(s, "%s needs a value", s.key())
			continue
		}
		switch s.key() {
		case "connect_ip":
			if a, err := parseAddr(args[0]); err != nil || a != addr {
				c.fail(s, "connect_ip %s refused: Sluice checks the backend's own address, %s", shown(args[0]), addr)
			}
		case "connect_port":
			if p, err := parsePort(args[0]); err != nil || p == 0 {
				c.fail(s, "connect_port %s is not a port from 1 to 65535", shown(args[0]))
			} else {
				hc.Port = p
			}
		default:
			note("SMTP_CHECK host %s: dropped, Sluice has no equivalent.", statement(s))
		}
	}
}

// placeAddress writes {address} for each argument of a MISC_CHECK command that is the real
// server's address, so that servers checked by one script share one check.
func placeAddress(argv []string, addr netip.Addr) []string {
	for i := 1; i < len(argv); i++ {
		if a, err := netip.ParseAddr(argv[i]); err == nil && a == addr {
			argv[i] = config.AddressPlaceholder
		}
	}
	return argv
}

// dnsCheck fills a dns check from DNS_CHECK's name and type (keepalived's defaults . and SOA).
func (c *kaConverter) dnsCheck(cs *stmt, hc *config.HealthCheck, name, qtype string) {
	hc.Type = config.CheckDNS
	if name != "" && name != config.DefaultQueryName {
		hc.QueryName = name
	}
	if qtype = strings.ToUpper(qtype); qtype != "" && qtype != string(config.DefaultDNSQueryType) {
		hc.QueryType = config.DNSQueryType(qtype)
		if !slices.Contains(config.DNSQueryTypes, hc.QueryType) {
			c.fail(cs, "DNS_CHECK type %s refused: Sluice asks for %v", shown(qtype), config.DNSQueryTypes)
		}
	}
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// httpCheck fills an http or https check from HTTP_GET or SSL_GET and its url blocks.
func (c *kaConverter) httpCheck(cs *stmt, hc *config.HealthCheck, urls []*stmt, host string, note func(string, ...any)) {
	hc.Type = config.CheckHTTP
	if cs.key() == "SSL_GET" {
		hc.Type = config.CheckHTTPS
		hc.InsecureSkipVerify = true
		note("SSL_GET checks without verifying the certificate: insecure_skip_verify: true, as keepalived without a ca.")
	}
	hc.Host = host
	hc.ExpectStatus = kaStatusDefault
	if len(urls) == 0 {
		c.fail(cs, "%s needs a url block with a path", cs.key())
		return
	}
	for _, extra := range urls[1:] {
		note("%s url at line %d: dropped, Sluice checks one path per service.", cs.key(), extra.line())
	}
	for _, s := range urls[0].block {
		if !c.keyword(s) {
			continue
		}
		args := s.args()
		if len(args) == 0 {
			c.fail(s, "%s needs a value", s.key())
			continue
		}
		switch s.key() {
		case "path":
			hc.Path = args[0]
		case "status_code":
			hc.ExpectStatus = nil
			for _, a := range args {
				r, err := config.ParseRange(a)
				if err != nil {
					c.fail(s, "status_code: %v", err)
				}
				hc.ExpectStatus = append(hc.ExpectStatus, r)
			}
		case "digest":
			if sum, err := hex.DecodeString(args[0]); err != nil || len(sum) != 16 {
				c.fail(s, "digest %s is not an MD5 digest: 32 hex digits, as genhash prints", shown(args[0]))
			}
			hc.ExpectDigest = strings.ToLower(args[0])
		case "regex", "regex_no_match":
			c.fail(s, "%s refused: Sluice looks for plain text in the body (expect_body), not a regular expression", s.key())
		case "virtualhost":
			hc.Host = args[0]
		default:
			note("url %s: dropped, Sluice has no equivalent.", statement(s))
		}
	}
	if hc.Path == "" {
		c.fail(urls[0], "url needs a path")
	}
}

// udpCheck fills a udp check from UDP_CHECK's payload and require_reply (hex in keepalived).
func (c *kaConverter) udpCheck(cs *stmt, hc *config.HealthCheck, payload, reply string, note func(string, ...any)) {
	hc.Type = config.CheckUDP
	if payload == "" {
		if reply != "" {
			c.fail(cs, "UDP_CHECK require_reply without a payload refused: a Sluice udp check waits for a reply only to a datagram it sends")
		}
		note("UDP_CHECK without a payload: an empty datagram, up unless an ICMP port unreachable comes back, as keepalived.")
		return
	}
	send, err := hex.DecodeString(payload)
	if err != nil {
		c.fail(cs, "UDP_CHECK payload %q is not hex", payload)
	}
	want, err := hex.DecodeString(reply)
	if err != nil {
		c.fail(cs, "UDP_CHECK require_reply %q is not hex", reply)
	}
	hc.Send, hc.Expect = string(send), string(want)
	if reply == "" {
		note("UDP_CHECK without require_reply: keepalived counts silence as up; Sluice waits for an answer to the payload.")
	}
}
