package importer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
)

// ipvsService is a service of a save file being read, and the forwarding of its first real server.
type ipvsService struct {
	Service
	line    int
	forward string // -g, -m: Sluice's mode is per service
	// servers are the lines of its real servers, by destination.
	servers map[netip.AddrPort]int
	// refused are the refusals of its real servers, which a partial import leaves it out for.
	refused []error
	more    int
	// listeners are the VIPs and ports it takes: its -t or -u, or its mark's services, each
	// under its name of names.
	listeners []listener
	names     []string
}

// ipvsReader reads the lines of one save file.
type ipvsReader struct {
	path     string
	errs     problems
	services []*ipvsService
	byKey    map[string]*ipvsService
	names    namer
	out      output
	// rules are the --fwmark-rules, nil without.
	rules *markRules
	// refusedAdds are the services of the -A lines refused, whose -a lines are not refused
	// again.
	refusedAdds map[string]bool
	// key is the service the line read last names ("" for none), adds whether it was an -A
	// line; partial is the result of a partial import, leftOut the keys of the -A lines it
	// left out and lone the lines it left out that are no service's.
	key     string
	adds    bool
	partial *Result
	leftOut map[string]bool
	lone    []Omission
}

// Ipvsadm converts the output of ipvsadm -Sn (or -S, when it holds no host or port names):
// -A lines make services (an -f fwmark service one per VIP and protocol of the
// opts.FwmarkRules that set its mark), -a lines their backends. With opts.Partial a service it cannot
// convert (or one of its real servers) is left out, and so is a line of no service.
func Ipvsadm(path string, opts Options) (*Result, error) {
	data, err := boundedread.File(path, boundedread.ImportBytes)
	if err != nil {
		return nil, err
	}
	rules, err := readMarkRules(opts.FwmarkRules)
	if err != nil {
		return nil, err
	}
	r := &ipvsReader{path: path, byKey: map[string]*ipvsService{}, names: namer{}, leftOut: map[string]bool{}, rules: rules, refusedAdds: map[string]bool{}}
	res := &Result{Source: "ipvsadm " + path + opts.rulesSource()}
	if opts.Partial {
		r.partial = res
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxLineBytes+1)
	n := 1
	for ; sc.Scan(); n++ {
		before := r.errs.count()
		r.key, r.adds = "", false
		if err := r.line(sc.Text(), n); err != nil {
			return nil, err
		}
		if r.partial != nil && r.errs.count() > before {
			if err := r.leaveOut(before, n); err != nil {
				return nil, err
			}
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return nil, &Error{path, n, fmt.Sprintf("a line longer than %s: not an ipvsadm -Sn save file", boundedread.Size(MaxLineBytes))}
	}
	if err := r.errs.err(); err != nil {
		return nil, err
	}
	if err := r.result(res); err != nil {
		return nil, err
	}
	if err := res.finish(path, opts.Partial); err != nil {
		return nil, err
	}
	return res, nil
}

// leaveOut leaves out what line n refused, after the first before refusals: an -a line's
// service (at its -A line), an -A line with the -a lines of its service, or the line alone.
func (r *ipvsReader) leaveOut(before, n int) error {
	reasons, more := r.errs.since(before)
	switch s := r.byKey[r.key]; {
	case r.key == "":
	case r.adds:
		if r.byKey[r.key] == nil {
			r.leftOut[r.key] = true
		}
	case s != nil:
		s.refused, s.more = append(s.refused, reasons...), s.more+more
		return nil
	case r.leftOut[r.key]:
		return nil // an -a line of an -A line left out
	}
	if len(r.lone) >= MaxServices {
		return &Error{r.path, n, fmt.Sprintf("more than %d lines left out: this is not a save file an import converts in part", MaxServices)}
	}
	r.lone = append(r.lone, Omission{File: r.path, Line: n, Reasons: reasons, More: more})
	return nil
}

// result makes the services of a partial import, with what it left out in the file's order.
func (r *ipvsReader) result(res *Result) error {
	lone := r.lone
	omitUpTo := func(line int) error {
		for ; len(lone) > 0 && lone[0].Line < line; lone = lone[1:] {
			if err := res.omit(pos{lone[0].File, lone[0].Line}, lone[0].Reasons, lone[0].More, len(res.Services)); err != nil {
				return err
			}
		}
		return nil
	}
	for _, s := range r.services {
		if err := omitUpTo(s.line); err != nil {
			return err
		}
		if s.refused != nil {
			if err := res.omit(s.at, s.refused, s.more, len(res.Services)); err != nil {
				return err
			}
			continue
		}
		if len(s.Backends) == 0 {
			s.Fallback = config.FallbackDrop
			s.Notes = append(s.Notes, "no real server: new flows are dropped.")
		}
		res.Services = append(res.Services, s.services()...)
	}
	return omitUpTo(math.MaxInt)
}

// services are the services of an -A line: one per listener.
func (s *ipvsService) services() []Service {
	var out []Service
	for i, l := range s.listeners {
		svc := s.Service
		svc.Notes = slices.Clone(s.Notes)
		if l.fwmark != 0 {
			svc.Notes = append(svc.Notes, fwmarkNote(l))
		}
		if len(s.listeners) > 1 {
			svc.Notes = append(svc.Notes, sharedMarkNote(l.fwmark, len(s.listeners)))
		}
		svc.VIP, svc.Protocol, svc.Name = config.IPFrom(l.vip), l.proto, s.names[i]
		svc.SetPorts(l.ports)
		svc.Backends = slices.Clone(s.Backends)
		out = append(out, svc)
	}
	return out
}

// ipvsKey is the service a line names by -t, -u or -f ("tcp 10.0.0.1:80", "fwmark 1"), "" for
// none.
func ipvsKey(opts map[string]string) string {
	key, ok := ipvsServiceKey(opts, func(string, ...any) {})
	if !ok {
		return ""
	}
	return key
}

// ipvsServiceKey is the service a line names: "tcp 10.0.0.1:80" or "fwmark 1".
func ipvsServiceKey(opts map[string]string, fail func(string, ...any)) (string, bool) {
	if m := opts["-f"]; m != "" {
		mark, err := parseMark(m)
		if err != nil {
			fail("-f: %v", err)
		}
		return fmt.Sprintf("fwmark %d", mark), err == nil
	}
	proto, at, ok := ipvsVirtual(opts, fail)
	return string(proto) + " " + at.String(), ok
}

// line reads line n; the error is a limit of limits.go, which ends the conversion.
func (r *ipvsReader) line(text string, n int) error {
	if strings.IndexByte(text, 0) >= 0 {
		return &Error{r.path, n, "a NUL byte: not a text file, not an ipvsadm -Sn save file"}
	}
	fields := strings.Fields(text)
	if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
		return nil
	}
	fail := func(format string, args ...any) { r.errs.add(r.path, n, format, args...) }
	opts, err := ipvsOptions(fields[1:])
	if err != nil {
		fail("%v", err)
		return nil
	}
	r.key, r.adds = ipvsKey(opts), fields[0] == "-A" || fields[0] == "--add-service"
	switch fields[0] {
	case "-A", "--add-service":
		key, ok := ipvsServiceKey(opts, fail)
		if !ok {
			return nil
		}
		if first := r.byKey[key]; first != nil {
			fail("%s is added twice (first at line %d): a save file adds a service once", key, first.line)
			return nil
		}
		s := newIPVSService(opts, n, r.listeners(opts, n, fail), fail)
		if s == nil {
			r.refusedAdds[key] = true
			return nil
		}
		if err := r.out.take(pos{r.path, n}, len(s.listeners), 0); err != nil {
			return err
		}
		for _, l := range s.listeners {
			s.names = append(s.names, r.names.name(l.proto, config.IPFrom(l.vip), l.ports))
		}
		s.at = pos{r.path, n}
		r.byKey[key] = s
		r.services = append(r.services, s)
	case "-a", "--add-server":
		if r.refusedAdds[r.key] {
			return nil
		}
		if s := addIPVSServer(opts, r.byKey, n, fail); s != nil {
			return r.out.take(pos{r.path, n}, 0, len(s.listeners))
		}
	default:
		fail("%s refused: a save file holds -A and -a lines (ipvsadm -Sn)", shown(fields[0]))
	}
	return nil
}

// ipvsOptions reads the options of a line: a flag, and the value after it where it takes one.
func ipvsOptions(words []string) (map[string]string, error) {
	opts := map[string]string{}
	for i := 0; i < len(words); i++ {
		flag := words[i]
		switch flag {
		case "-t", "-u", "-f", "--sctp-service", "-s", "-M", "-b", "-r", "-w", "-x", "-y", "--pe", "--tun-type", "--tun-port", "--tcp-service", "--udp-service", "--fwmark-service", "--scheduler", "--real-server", "--weight", "--netmask", "--sched-flags", "--u-threshold", "--l-threshold":
			if i+1 == len(words) {
				return nil, fmt.Errorf("%s needs a value", flag)
			}
			if _, twice := opts[ipvsShort(flag)]; twice {
				return nil, fmt.Errorf("%s is given twice: a line takes each option once", flag)
			}
			opts[ipvsShort(flag)] = words[i+1]
			i++
		case "-p", "--persistent":
			opts["-p"] = "300" // IPVS's default timeout
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
				opts["-p"] = words[i+1]
				i++
			}
		case "-g", "-m", "-i", "--gatewaying", "--masquerading", "--ipip", "-o", "--ops", "--tun-nocsum", "--tun-csum", "--tun-remcsum":
			opts[ipvsShort(flag)] = ""
		default:
			return nil, fmt.Errorf("option %s is not one Sluice knows", shown(flag))
		}
	}
	return opts, nil
}

// ipvsLong are the short forms of ipvsadm's long options.
var ipvsLong = map[string]string{"--tcp-service": "-t", "--udp-service": "-u", "--fwmark-service": "-f", "--scheduler": "-s",
	"--real-server": "-r", "--weight": "-w", "--netmask": "-M", "--sched-flags": "-b", "--u-threshold": "-x",
	"--l-threshold": "-y", "--gatewaying": "-g", "--masquerading": "-m", "--ipip": "-i", "--ops": "-o", "--sctp-service": "-q"}

// ipvsShort is the short form of an ipvsadm option.
func ipvsShort(flag string) string {
	if short, ok := ipvsLong[flag]; ok {
		return short
	}
	return flag
}

// ipvsTunnel reads an -a line's tunnel options: with -i, --tun-type ipip (the default, "" as
// Sluice's) or gue with --tun-port (and --tun-nocsum, IPVS's default and Sluice's); ok is false,
// having failed, for GRE, a checksum option, or tunnel options without -i.
func ipvsTunnel(opts map[string]string, forward string, fail func(string, ...any)) (tunnel config.Tunnel, guePort int, ok bool) {
	kind, port := opts["--tun-type"], opts["--tun-port"]
	_, csum := opts["--tun-csum"]
	_, remcsum := opts["--tun-remcsum"]
	_, nocsum := opts["--tun-nocsum"]
	switch {
	case forward != "-i":
		if kind != "" || port != "" || csum || remcsum || nocsum {
			fail("--tun-* options need -i (tunnel forwarding)")
			return "", 0, false
		}
		return "", 0, true
	case csum || remcsum:
		fail("--tun-csum and --tun-remcsum refused: Sluice's GUE sends a UDP checksum of 0 (--tun-nocsum)")
	case kind == "" || kind == "ipip":
		if port != "" || nocsum {
			fail("--tun-port and --tun-nocsum only apply to --tun-type gue")
			return "", 0, false
		}
		return config.TunnelIPIP, 0, true
	case kind == "gue":
		n, err := parsePort(port)
		if err != nil || n == 0 {
			fail("--tun-type gue needs --tun-port, a port from 1 to 65535")
			return "", 0, false
		}
		return config.TunnelGUE, n, true
	default:
		fail("--tun-type %s refused: Sluice tunnels in ipip or gue", shown(kind))
	}
	return "", 0, false
}

// listeners are the VIP and port of an -A line's -t or -u, or the services of its -f mark by
// the --fwmark-rules; nil when refused.
func (r *ipvsReader) listeners(opts map[string]string, n int, fail func(string, ...any)) []listener {
	if m := opts["-f"]; m != "" {
		ls, err := r.rules.listeners(m)
		if err != nil {
			fail("-f %s (fwmark service) refused: %v", m, err)
		}
		return ls
	}
	proto, at, ok := ipvsVirtual(opts, fail)
	switch {
	case !ok:
		return nil
	case at.Port() == 0:
		fail("port 0 (every port of a persistent service) refused: Sluice's services take a port or a range (write an -A line per port, or the range in the imported config)")
		return nil
	}
	return []listener{{vip: at.Addr(), proto: proto, ports: onePort(int(at.Port())), at: pos{r.path, n}}}
}

// ipvsVirtual is the protocol and VIP:PORT of a line's -t or -u.
func ipvsVirtual(opts map[string]string, fail func(string, ...any)) (config.Protocol, netip.AddrPort, bool) {
	switch {
	case opts["-q"] != "":
		fail("SCTP service refused: Sluice balances TCP and UDP")
	case opts["-t"] != "":
		ap, err := parseAddrPort(opts["-t"])
		if err != nil {
			fail("-t: %v", err)
		}
		return config.ProtocolTCP, ap, err == nil
	case opts["-u"] != "":
		ap, err := parseAddrPort(opts["-u"])
		if err != nil {
			fail("-u: %v", err)
		}
		return config.ProtocolUDP, ap, err == nil
	default:
		fail("needs -t or -u VIP:PORT")
	}
	return "", netip.AddrPort{}, false
}

// parseAddrPort parses 10.0.0.1:80 or [fd00::1]:80, refusing host and service names.
func parseAddrPort(text string) (netip.AddrPort, error) {
	i := strings.LastIndexByte(text, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("%s is not ADDRESS:PORT", shown(text))
	}
	addr, err := parseAddr(text[:i])
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := parsePort(text[i+1:])
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// newIPVSService converts an -A line taking the listeners (nil: refused).
func newIPVSService(opts map[string]string, line int, listeners []listener, fail func(string, ...any)) *ipvsService {
	if listeners == nil {
		return nil
	}
	s := &ipvsService{line: line, servers: map[netip.AddrPort]int{}, listeners: listeners}
	s.Notes = []string{fmt.Sprintf("from -A at line %d", line)}
	sched, why, ok := ipvsScheduler(cmpOr(opts["-s"], "wlc"))
	if !ok {
		fail("-s %s refused: %s", opts["-s"], why)
		return nil
	}
	if why != "" {
		s.Notes = append(s.Notes, "-s "+opts["-s"]+": "+why+".")
	}
	s.Scheduler = sched
	if p, ok := opts["-p"]; ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > int(config.MaxPersistenceTimeout.Seconds()) {
			fail("-p %s is not a number of seconds from 1 to %d", p, int(config.MaxPersistenceTimeout.Seconds()))
			return nil
		}
		s.PersistenceTimeout = seconds(time.Duration(n) * time.Second)
		if m := opts["-M"]; m != "" {
			prefix, err := maskPrefix(m)
			if err != nil {
				fail("-M: %v", err)
				return nil
			}
			if full := listeners[0].vip.BitLen(); prefix != full {
				s.PersistenceGranularity = prefix
			}
		}
	}
	for _, flag := range strings.Split(opts["-b"], ",") {
		switch flag {
		case "":
		case "sh-port", "mh-port":
			s.SHPort = s.Scheduler == config.SchedulerSH
		default:
			s.Notes = append(s.Notes, "-b "+flag+": dropped, Sluice's sh always skips backends that cannot take the flow.")
		}
	}
	if _, ok := opts["-o"]; ok {
		s.Notes = append(s.Notes, "-o (one-packet scheduling): dropped, Sluice tracks UDP flows.")
	}
	if pe := opts["--pe"]; pe != "" {
		fail("--pe %s refused: Sluice has no persistence engine", pe)
		return nil
	}
	return s
}

// addIPVSServer converts the -a line at line into a backend of its service, which it returns
// (nil when it added none).
func addIPVSServer(opts map[string]string, byKey map[string]*ipvsService, line int, fail func(string, ...any)) *ipvsService {
	at, ok := ipvsServiceKey(opts, fail)
	if !ok {
		return nil
	}
	s := byKey[at]
	if s == nil {
		fail("%s has no -A line before", at)
		return nil
	}
	forward := "-g" // ipvsadm's default
	for _, f := range []string{"-g", "-m", "-i"} {
		if _, ok := opts[f]; ok {
			forward = f
		}
	}
	tunnel, guePort, ok := ipvsTunnel(opts, forward, fail)
	if !ok {
		return nil
	}
	if tunnel != "" {
		forward += " --tun-type " + string(tunnel)
	}
	if guePort != 0 {
		forward += " --tun-port " + strconv.Itoa(guePort)
	}
	if s.forward != "" && s.forward != forward {
		fail("%s differs from %s of the service's real servers before: Sluice's mode is per service", forward, s.forward)
		return nil
	}
	if s.forward == "" && tunnel != "" {
		s.Notes = append(s.Notes, "-i: IPVS's tunnel is mode tunnel (datapath ebpf); the backends decapsulate as they did for IPVS (ip link add ... type ipip, or fou for gue) or with sluice decap attach.")
	}
	s.forward = forward
	s.Mode = map[string]config.Mode{"-g": config.ModeDSR, "-m": config.ModeNAT, "-i": config.ModeTunnel}[forward[:2]]
	if tunnel == config.TunnelGUE {
		s.Tunnel, s.GUEPort = tunnel, guePort
	}
	rip, err := parseAddrPort(opts["-r"])
	if err != nil {
		fail("-r: %v", err)
		return nil
	}
	b := config.Backend{Address: config.IPFrom(rip.Addr()), Port: int(rip.Port())}
	if s.Mode.Direct() {
		b.Port = 0 // IPVS DR and TUN keep the packet's destination port
	}
	if w, ok := opts["-w"]; ok {
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 || n > config.MaxWeight {
			fail("-w %s is not a weight from 0 to %d", w, config.MaxWeight)
			return nil
		}
		if n != 1 {
			b.Weight = &n
		}
	}
	for flag, field := range map[string]*int{"-x": &b.MaxConnections, "-y": &b.MinConnections} {
		if v, ok := opts[flag]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > config.MaxConnectionThreshold {
				fail("%s %s is not a number of connections from 0 to %d", flag, v, config.MaxConnectionThreshold)
				return nil
			}
			*field = n
		}
	}
	if b.MaxConnections == 0 {
		b.MinConnections = 0 // IPVS only uses the lower threshold below an upper one
	}
	key := netip.AddrPortFrom(b.Address.Addr, uint16(b.Port))
	if first, dup := s.servers[key]; dup {
		fail("%s is added twice to %s (first at line %d)", rip, at, first)
		return nil
	}
	s.servers[key] = line
	s.Backends = append(s.Backends, b)
	s.backendAt = append(s.backendAt, pos{s.at.file, line})
	return s
}
