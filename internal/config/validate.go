package config

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/maglev"
)

// MaxWeight is the largest backend weight.
const MaxWeight = 1000

// DefaultFlowTimeout is how long an idle DSR flow keeps its backend.
const DefaultFlowTimeout = 5 * time.Minute

// serviceName is the rule of a service name, for the schema; validServiceName applies it.
var serviceName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,31}$`)

// validServiceName tells whether name matches serviceName, without the regexp engine: a config
// names up to hundreds of thousands of services.
func validServiceName(name string) bool {
	if len(name) == 0 || len(name) > 32 || !isASCIILetter(name[0]) {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isASCIILetter(c) && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// Validate checks the whole config and fills in defaults; it returns every problem found.
func (c *Config) Validate() Errors {
	var errs Errors
	fail := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	c.Datapath = oneOf(c.Datapath, Datapaths, DefaultDatapath, "datapath", fail)
	switch {
	case c.Datapath == DatapathEBPF:
		c.Attach = oneOf(c.Attach, Attaches, DefaultAttach, "attach", fail)
	case c.Attach != "":
		fail("attach", "only applies to datapath ebpf, not %s", c.Datapath)
	}
	if c.EBPF != nil {
		if c.Datapath != DatapathEBPF {
			fail("ebpf", "only applies to datapath ebpf, not %s", c.Datapath)
		}
		if n := c.EBPF.MaxFlows; n != 0 && !maxFlowsBounds.has(n) {
			fail("ebpf.max_flows", "%d is out of range %s", n, maxFlowsBounds)
		}
		if n := c.EBPF.MaglevSlots; n != 0 && !maglevSlotsBounds.has(n) {
			fail("ebpf.maglev_slots", "%d is out of range %s", n, maglevSlotsBounds)
		}
	}
	c.State.validate(fail)
	c.validateNFT(fail)
	c.validateBGP(fail)
	c.validateSync(fail)
	for i, name := range c.Interfaces {
		if !validInterfaceName(name) {
			fail(fmt.Sprintf("interfaces[%d]", i), "%q is not an interface name (%s)", name, interfaceNameRule)
		}
	}
	names := map[string]int{}
	// Services that could overlap share a VIP and a protocol; only those are compared.
	type listener struct {
		vip   netip.Addr
		proto Protocol
	}
	listeners := map[listener][]int{}
	vips := c.vipOwners()
	for i := range c.Services {
		s := &c.Services[i]
		at := "services[" + strconv.Itoa(i) + "]"
		vip, vipOK := s.validate(at, vips, c.Datapath, fail)
		if j, dup := names[s.Name]; dup && s.Name != "" {
			fail(at+".name", "%q is already the name of services[%d]", s.Name, j)
		}
		names[s.Name] = i
		if !vipOK {
			continue
		}
		l := listener{vip, s.Protocol}
		for _, j := range listeners[l] {
			if o := &c.Services[j]; o.AllPorts().Overlaps(s.AllPorts()) {
				fail(at, "%s %s:%s overlaps services[%d] (%s)", s.Protocol, s.VIP, s.AllPorts(), j, o.Name)
			}
		}
		listeners[l] = append(listeners[l], i)
	}
	c.validateServiceBGP(fail)
	c.validateEBPFPorts(fail)
	return errs
}

// validate checks the service and fills in its defaults; it returns the VIP when it is valid.
func (s *Service) validate(at string, vips vipOwners, datapath Datapath, fail func(path, format string, args ...any)) (netip.Addr, bool) {
	if !validServiceName(s.Name) {
		fail(at+".name", "%q is not a service name (a letter, then up to 31 letters, digits, '-' or '_')", s.Name)
	}
	vip, vipErr := parseIP(s.VIP)
	if vipErr != nil {
		fail(at+".vip", "%v", vipErr)
	} else {
		s.VIP.Addr = vip
	}
	s.validatePorts(at, fail)
	if s.Backends == nil { // one value for none, which the config written back holds: []
		s.Backends = []Backend{}
	}
	s.Protocol = oneOf(s.Protocol, Protocols, DefaultProtocol, at+".protocol", fail)
	s.Mode = oneOf(s.Mode, Modes, DefaultMode, at+".mode", fail)
	s.Scheduler = oneOf(s.Scheduler, Schedulers, DefaultScheduler, at+".scheduler", fail)
	// An unset fallback stays unset: it tells a service without backends from one that drops.
	s.Fallback = oneOf(s.Fallback, Fallbacks, "", at+".fallback", fail)
	if s.Fallback == FallbackReject && s.Mode.Direct() {
		fail(at+".fallback", "%s can only drop: its rules run on ingress, before the stack could answer", s.Mode)
	}
	if s.TableSize != 0 {
		s.validateTableSize(at+".table_size", fail)
	}
	if !s.FlowTimeout.IsZero() {
		if !s.Mode.Direct() {
			fail(at+".flow_timeout", "only applies to modes dsr and tunnel (nat and fullnat flows are tracked by conntrack)")
		} else if !s.FlowTimeout.within(time.Second, math.MaxInt64, 1) {
			fail(at+".flow_timeout", "%q is not a duration of at least 1s (like 5m)", s.FlowTimeout)
		}
	}
	if len(s.Backends) == 0 && s.Fallback == "" {
		fail(at+".backends", "no backends and no fallback: add backends or set fallback: drop|reject")
	}
	if s.Fallback == FallbackSorry && len(s.SorryServers) == 0 {
		fail(at+".fallback", "sorry needs at least one entry in sorry_servers")
	}
	if len(s.SorryServers) > 0 && s.Fallback != FallbackSorry {
		fail(at+".sorry_servers", "only used with fallback: sorry")
	}
	if s.HealthCheck != nil {
		s.HealthCheck.validate(at+".health_check", fail)
	}
	s.validateSessions(at, datapath, vip.Is6(), vipErr == nil, fail)
	s.validateProtection(at, datapath, vip.Is6(), vipErr == nil, fail)
	seen := map[netip.AddrPort]backendPath{}
	s.validateBackends(at+".backends", s.Backends, vip, vipErr == nil, vips, seen, fail)
	s.validateBackends(at+".sorry_servers", s.SorryServers, vip, vipErr == nil, vips, seen, fail)
	s.validateFullNATSource(at+".fullnat_source", vip, vipErr == nil, vips, fail)
	s.validateTunnel(at, vip, vipErr == nil, vips, datapath, fail)
	return vip, vipErr == nil
}

// validateTableSize checks a table_size that is set: a prime Maglev table with a slot for every
// backend and sorry server.
func (s *Service) validateTableSize(at string, fail func(path, format string, args ...any)) {
	m, need := s.TableSize, max(len(s.Backends)+len(s.SorryServers), 2)
	switch {
	case !s.Scheduler.UsesTable():
		fail(at, "only applies to schedulers maglev, mh and sh, not %s", s.Scheduler)
	case m < need || m > int(tableSizeBounds.max):
		fail(at, "%d is out of range %s (a prime, no smaller than the number of backends and sorry servers)", m, bounds{int64(need), tableSizeBounds.max})
	case !maglev.IsPrime(m) && maglev.NextPrime(m) <= maglev.MaxSize:
		fail(at, "%d is not a prime (the next prime is %d)", m, maglev.NextPrime(m))
	case !maglev.IsPrime(m):
		fail(at, "%d is not a prime", m)
	}
}

// backendPath is where a backend is in a service: the list's path and the index.
type backendPath struct {
	list  string
	index int
}

func (p backendPath) String() string { return fmt.Sprintf("%s[%d]", p.list, p.index) }

// validateBackends checks a list of backends; seen holds where the addresses already used are.
// Paths are only written out for what fails: a config holds up to hundreds of thousands of backends.
func (s *Service) validateBackends(at string, backends []Backend, vip netip.Addr, vipOK bool, vips vipOwners, seen map[netip.AddrPort]backendPath, fail func(path, format string, args ...any)) {
	for j := range backends {
		b := &backends[j]
		bat := backendPath{at, j}.String
		addr, err := parseIP(b.Address)
		switch {
		case err != nil:
			fail(bat()+".address", "%v", err)
		case vipOK && addr == vip:
			fail(bat()+".address", "%s is the service's own vip: the balancer would send the flows to itself", addr)
		case vips.has(addr):
			fail(bat()+".address", "%s is the vip of %s: the balancer would send the flows to itself", addr, vips.name(addr))
		case vipOK && addr.Is4() != vip.Is4() && s.Mode != ModeTunnel: // tunnel: validateTunnel
			fail(bat()+".address", "%s and vip %s are of different address families", addr, vip)
		}
		if err == nil {
			b.Address.Addr = addr
		}
		if !anyPortBounds.has(b.Port) {
			fail(bat()+".port", "%d is not a port in %s", b.Port, portBounds)
		}
		if ports := s.AllPorts(); s.Mode.Direct() && b.Port != 0 && (!ports.Single() || b.Port != ports.First()) {
			fail(bat()+".port", "%s cannot remap ports (backend port %d, service port %s): the packet keeps its destination", s.Mode, b.Port, ports)
		}
		if w := b.WeightOrDefault(); !weightBounds.has(w) {
			fail(bat()+".weight", "%d is out of range %s", w, weightBounds)
		}
		if b.HealthCheck != nil {
			if strings.HasSuffix(at, ".sorry_servers") {
				fail(bat()+".health_check", "sorry servers are not health-checked")
			} else {
				b.HealthCheck.validate(bat()+".health_check", fail)
			}
		}
		if err != nil || !anyPortBounds.has(b.Port) {
			continue
		}
		// A backend without a port takes the client's, which for a single port is the service's:
		// 10.0.0.1 and 10.0.0.1:80 of a service on port 80 are one destination.
		port := b.Port
		if ports := s.AllPorts(); port == 0 && ports.Single() {
			port = ports.First()
		}
		key := netip.AddrPortFrom(addr, uint16(port))
		if other, dup := seen[key]; dup {
			fail(bat(), "%s port %d is already %s (a backend without a port takes the service's)", addr, port, other)
		} else {
			seen[key] = backendPath{at, j}
		}
	}
}

// oneOf returns v, or def when v is empty, and reports values outside allowed.
func oneOf[T ~string](v T, allowed []T, def T, path string, fail func(path, format string, args ...any)) T {
	if v == "" {
		return def
	}
	if !slices.Contains(allowed, v) {
		fail(path, "%q is not one of %v", v, allowed)
	}
	return v
}
