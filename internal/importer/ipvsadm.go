package importer

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
)

// ipvsService is a service of a save file being read, and the forwarding of its first real server.
type ipvsService struct {
	Service
	line    int
	forward string // -g, -m: Sluice's mode is per service
}

// Ipvsadm converts the output of ipvsadm -Sn (or -S, when it holds no host or port names):
// -A lines make services, -a lines their backends.
func Ipvsadm(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var errs problems
	var services []*ipvsService
	byKey := map[string]*ipvsService{}
	names := namer{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		fail := func(format string, args ...any) { errs.add(path, n, format, args...) }
		opts, err := ipvsOptions(fields[1:])
		if err != nil {
			fail("%v", err)
			continue
		}
		switch fields[0] {
		case "-A", "--add-service":
			s := newIPVSService(opts, n, fail)
			if s == nil {
				continue
			}
			key := string(s.Protocol) + " " + hostPortText(s.VIP, s.Port.First)
			if _, dup := byKey[key]; dup {
				fail("%s is added twice", key)
				continue
			}
			s.Name = names.name(s.Protocol, s.VIP, s.Port)
			byKey[key] = s
			services = append(services, s)
		case "-a", "--add-server":
			addIPVSServer(opts, byKey, fail)
		default:
			fail("%s refused: a save file holds -A and -a lines (ipvsadm -Sn)", fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	res := &Result{Source: "ipvsadm " + path}
	for _, s := range services {
		if len(s.Backends) == 0 {
			s.Fallback = config.FallbackDrop
			s.Notes = append(s.Notes, "no real server: new flows are dropped.")
		}
		res.Services = append(res.Services, s.Service)
	}
	return res, nil
}

// ipvsOptions reads the options of a line: a flag, and the value after it where it takes one.
func ipvsOptions(words []string) (map[string]string, error) {
	opts := map[string]string{}
	for i := 0; i < len(words); i++ {
		flag := words[i]
		switch flag {
		case "-t", "-u", "-f", "--sctp-service", "-s", "-M", "-b", "-r", "-w", "-x", "-y", "--pe", "--tcp-service", "--udp-service", "--fwmark-service", "--scheduler", "--real-server", "--weight", "--netmask", "--sched-flags", "--u-threshold", "--l-threshold":
			if i+1 == len(words) {
				return nil, fmt.Errorf("%s needs a value", flag)
			}
			opts[ipvsShort(flag)] = words[i+1]
			i++
		case "-p", "--persistent":
			opts["-p"] = "300" // IPVS's default timeout
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
				opts["-p"] = words[i+1]
				i++
			}
		case "-g", "-m", "-i", "--gatewaying", "--masquerading", "--ipip", "-o", "--ops":
			opts[ipvsShort(flag)] = ""
		default:
			return nil, fmt.Errorf("option %s is not one Sluice knows", flag)
		}
	}
	return opts, nil
}

// ipvsShort is the short form of an ipvsadm option.
func ipvsShort(flag string) string {
	long := map[string]string{"--tcp-service": "-t", "--udp-service": "-u", "--fwmark-service": "-f", "--scheduler": "-s",
		"--real-server": "-r", "--weight": "-w", "--netmask": "-M", "--sched-flags": "-b", "--u-threshold": "-x",
		"--l-threshold": "-y", "--gatewaying": "-g", "--masquerading": "-m", "--ipip": "-i", "--ops": "-o", "--sctp-service": "-q"}
	if short, ok := long[flag]; ok {
		return short
	}
	return flag
}

// ipvsVirtual is the protocol and VIP:PORT of a line's -t or -u.
func ipvsVirtual(opts map[string]string, fail func(string, ...any)) (config.Protocol, netip.AddrPort, bool) {
	switch {
	case opts["-f"] != "":
		fail("-f %s (fwmark service) refused: Sluice matches a VIP and ports, not a firewall mark", opts["-f"])
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
		return netip.AddrPort{}, fmt.Errorf("%q is not ADDRESS:PORT", text)
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

func hostPortText(addr config.IP, port int) string {
	return netip.AddrPortFrom(addr.Addr, uint16(port)).String()
}

// newIPVSService converts an -A line.
func newIPVSService(opts map[string]string, line int, fail func(string, ...any)) *ipvsService {
	proto, at, ok := ipvsVirtual(opts, fail)
	if !ok {
		return nil
	}
	s := &ipvsService{line: line}
	s.VIP, s.Port, s.Protocol = config.IPFrom(at.Addr()), config.Range{First: int(at.Port()), Last: int(at.Port())}, proto
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
		s.PersistenceTimeout = fmt.Sprintf("%ds", n)
		if m := opts["-M"]; m != "" {
			prefix, err := maskPrefix(m)
			if err != nil {
				fail("-M: %v", err)
				return nil
			}
			if full := at.Addr().BitLen(); prefix != full {
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

// addIPVSServer converts an -a line into a backend of its service.
func addIPVSServer(opts map[string]string, byKey map[string]*ipvsService, fail func(string, ...any)) {
	proto, at, ok := ipvsVirtual(opts, fail)
	if !ok {
		return
	}
	s := byKey[string(proto)+" "+at.String()]
	if s == nil {
		fail("%s %s has no -A line before", proto, at)
		return
	}
	forward := "-g" // ipvsadm's default
	for _, f := range []string{"-g", "-m", "-i"} {
		if _, ok := opts[f]; ok {
			forward = f
		}
	}
	switch {
	case forward == "-i":
		fail("-i (tunnel) refused: Sluice forwards by NAT or direct routing, not through IP-in-IP tunnels")
		return
	case s.forward != "" && s.forward != forward:
		fail("%s differs from %s of the service's real servers before: Sluice's mode is per service", forward, s.forward)
		return
	}
	s.forward = forward
	s.Mode = map[string]config.Mode{"-g": config.ModeDSR, "-m": config.ModeNAT}[forward]
	rip, err := parseAddrPort(opts["-r"])
	if err != nil {
		fail("-r: %v", err)
		return
	}
	b := config.Backend{Address: config.IPFrom(rip.Addr()), Port: int(rip.Port())}
	if s.Mode == config.ModeDSR {
		b.Port = 0
	}
	if w, ok := opts["-w"]; ok {
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 || n > config.MaxWeight {
			fail("-w %s is not a weight from 0 to %d", w, config.MaxWeight)
			return
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
				return
			}
			*field = n
		}
	}
	if b.MaxConnections == 0 {
		b.MinConnections = 0 // IPVS only uses the lower threshold below an upper one
	}
	if slices.ContainsFunc(s.Backends, func(o config.Backend) bool { return o.Address == b.Address && o.Port == b.Port }) {
		fail("%s is added twice to %s", rip, at)
		return
	}
	s.Backends = append(s.Backends, b)
}
