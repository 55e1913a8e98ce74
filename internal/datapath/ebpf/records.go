package ebpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// The BPF program needs ids, rings and addresses; listing a service and rebuilding its ids after
// a restart needs more (names, weights, which backend belongs to which service). Sluice keeps
// that in two maps of its own, pinned next to the program's and never read by it: service_meta
// and backend_meta, keyed by the same ids.
const (
	serviceMetaName = "service_meta"
	backendMetaName = "backend_meta"
)

// recordRetired marks the record of a service or backend that left the plan while flows may
// still use it: its id stays reserved (and a backend stays BACKEND_VALID) until a resync finds
// its flows idle.
const recordRetired = 1

// serviceRecord is a service as Sluice programmed it, the value of service_meta.
type serviceRecord struct {
	Name      [32]byte
	Scheduler [8]byte
	VIP       [16]byte
	// PortFirst and PortLast bound the service's ports: the vips entries of the service are
	// its ports (a service on a list of ports has gaps between them).
	PortFirst   uint16
	PortLast    uint16
	Proto       uint8
	Family      uint8
	Mode        sluiceMode
	Fallback    sluiceFallback
	RingOffset  uint32
	RingSize    uint32
	FlowTimeout uint32 // seconds: how long an idle flow counts as active
	// Flags holds recordRetired, in bits 8-15 the service_flags the program sees besides
	// SERVICE_RETIRED (schedulers, persistence, counting), and in bits 16-23 its service_source.
	Flags uint32
}

// serviceFlagsShift and serviceSourceShift are where a record's Flags keep the service's
// service_flags and service_source.
const (
	serviceFlagsShift  = 8
	serviceSourceShift = 16
)

// backendRecord is a backend as Sluice programmed it, the value of backend_meta.
type backendRecord struct {
	Addr    [16]byte
	Port    uint16 // host byte order; 0: the port the client used
	Family  uint8
	Flags   uint8 // recordRetired
	Service uint32
	Weight  uint32
}

// metaSpecs are the specs of Sluice's own maps, sized like the program's maps for the same ids.
func metaSpecs(services, backends uint32) []*ebpf.MapSpec {
	return []*ebpf.MapSpec{
		{Name: serviceMetaName, Type: ebpf.Hash, KeySize: 4, ValueSize: uint32(binary.Size(serviceRecord{})), MaxEntries: services, Pinning: ebpf.PinByName},
		{Name: backendMetaName, Type: ebpf.Hash, KeySize: 4, ValueSize: uint32(binary.Size(backendRecord{})), MaxEntries: backends, Pinning: ebpf.PinByName},
	}
}

// serviceRecordOf records a service of the plan, without its ring.
func serviceRecordOf(s *plan.Service) (serviceRecord, error) {
	r := serviceRecord{
		PortFirst: uint16(s.Ports.First()), PortLast: uint16(s.Ports[len(s.Ports)-1].Last),
		Proto: wireProtocols[s.Protocol], Mode: wireModes[s.Mode], Fallback: wireFallbacks[s.Fallback],
		FlowTimeout: uint32(s.FlowTimeout / time.Second),
	}
	r.VIP, r.Family = wireAddr(s.VIP)
	r.Flags = uint32(serviceFlagsOf(s))<<serviceFlagsShift | uint32(serviceSourceOf(s))<<serviceSourceShift
	if err := setRecordText(r.Name[:], s.Name); err != nil {
		return r, err
	}
	return r, setRecordText(r.Scheduler[:], string(s.Scheduler))
}

// serviceFlagsOf are the service_flags of a service of the plan (SERVICE_RETIRED aside).
func serviceFlagsOf(s *plan.Service) sluiceServiceFlags {
	var f sluiceServiceFlags
	switch {
	case s.Scheduler == config.SchedulerSH && s.SHPort:
		f |= sluiceServiceFlagsSERVICE_HASH_SOURCE | sluiceServiceFlagsSERVICE_HASH_SPORT
	case s.Scheduler == config.SchedulerSH:
		f |= sluiceServiceFlagsSERVICE_HASH_SOURCE
	case s.Scheduler == config.SchedulerLC:
		f |= sluiceServiceFlagsSERVICE_LEAST_CONN | sluiceServiceFlagsSERVICE_COUNT_CONNS
	case s.Scheduler == config.SchedulerWLC:
		f |= sluiceServiceFlagsSERVICE_LEAST_CONN | sluiceServiceFlagsSERVICE_WEIGHTED | sluiceServiceFlagsSERVICE_COUNT_CONNS
	}
	if serviceSettingsOf(s) != (sluiceServiceSettings{}) {
		f |= sluiceServiceFlagsSERVICE_OPTS
	}
	if s.Limits != (config.Limits{}) {
		f |= sluiceServiceFlagsSERVICE_LIMITS
	}
	for _, b := range s.Backends {
		if b.MaxConns > 0 {
			f |= sluiceServiceFlagsSERVICE_COUNT_CONNS
		}
	}
	return f
}

// serviceSettingsOf is a service's entry in service_opts.
func serviceSettingsOf(s *plan.Service) sluiceServiceSettings {
	var o sluiceServiceSettings
	if s.Persistence > 0 {
		o.PersistNs, o.PersistPrefix = uint64(s.Persistence), uint8(s.PersistencePrefix)
	}
	if len(s.SourceAllow) > 0 {
		o.Sources |= sluiceSourceListsSOURCES_ALLOW
	}
	if len(s.SourceDeny) > 0 {
		o.Sources |= sluiceSourceListsSOURCES_DENY
	}
	if l := s.Limits; l != (config.Limits{}) {
		o.RateNs, o.ClientRateNs = intervalOf(l.NewConnectionsPerSecond), intervalOf(l.NewConnectionsPerSourcePerSecond)
		o.MaxConns, o.MaxClientConns = uint32(l.Connections), uint32(l.ConnectionsPerSource)
		if s.LimitAction == config.LimitReset {
			o.LimitAction = sluiceLimitActionLIMIT_RESET
		}
	}
	return o
}

// intervalOf is the mean interval between flows at a rate per second (0: no limit).
func intervalOf(perSecond int) uint64 {
	if perSecond <= 0 {
		return 0
	}
	return uint64(time.Second) / uint64(perSecond)
}

// backendSettingsOf is the entry in backend_opts of a backend of service s: none unless s counts
// connections, the only services whose program reads it.
func backendSettingsOf(s *plan.Service, b plan.Backend) sluiceBackendSettings {
	if serviceFlagsOf(s)&sluiceServiceFlagsSERVICE_COUNT_CONNS == 0 {
		return sluiceBackendSettings{}
	}
	return sluiceBackendSettings{Weight: uint32(b.Weight), MaxConns: uint32(b.MaxConns), MinConns: uint32(b.MinConns)}
}

// backendRecordOf records a backend of the plan for service id.
func backendRecordOf(service uint32, b plan.Backend) backendRecord {
	r := backendRecord{Port: b.Port, Service: service, Weight: uint32(b.Weight)}
	r.Addr, r.Family = wireAddr(b.Addr)
	return r
}

func (r *serviceRecord) name() string { return recordText(r.Name[:]) }
func (r *serviceRecord) scheduler() config.Scheduler {
	return config.Scheduler(recordText(r.Scheduler[:]))
}
func (r *serviceRecord) retired() bool   { return r.Flags&recordRetired != 0 }
func (r *serviceRecord) vip() netip.Addr { return addrFromWire(r.VIP, r.Family) }

// source is where the service's flows take their fullnat source from.
func (r *serviceRecord) source() sluiceServiceSource {
	return sluiceServiceSource(r.Flags >> serviceSourceShift)
}

func (r *backendRecord) retired() bool { return r.Flags&recordRetired != 0 }

// backend is the plan backend the record was made from.
func (r *backendRecord) backend() plan.Backend {
	return plan.Backend{Addr: addrFromWire(r.Addr, r.Family), Port: r.Port, Weight: int(r.Weight)}
}

// entry is the backends map entry of a backend in use: one that takes new flows (weight, not
// retired) may be picked again by persistence.
func (r *backendRecord) entry() sluiceBackend {
	flags := sluiceBackendFlagsBACKEND_VALID
	if r.Weight > 0 && !r.retired() {
		flags |= sluiceBackendFlagsBACKEND_TAKES_NEW
	}
	return sluiceBackend{Addr: r.Addr, Port: wirePort(r.Port), Family: r.Family, Flags: flags}
}

// setRecordText stores s NUL-padded in a fixed-size field.
func setRecordText(dst []byte, s string) error {
	if len(s) > len(dst) {
		return fmt.Errorf("%q is longer than %d bytes", s, len(dst))
	}
	copy(dst, s)
	return nil
}

func recordText(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// vipKeys are the service's keys in vips, for its ports: one per port (none for the zero record
// of a service not programmed yet).
func (r *serviceRecord) vipKeys(ports config.PortList) []sluiceVipKey {
	if r.Proto == 0 {
		return nil
	}
	keys := make([]sluiceVipKey, 0, ports.Count())
	for _, pr := range ports {
		for p := pr.First; p <= pr.Last; p++ {
			keys = append(keys, vipKeyOf(r.vip(), uint16(p), r.Proto))
		}
	}
	return keys
}

// owns tells whether a vips key is one of the service's, for its ports.
func (r *serviceRecord) owns(k sluiceVipKey, ports config.PortList) bool {
	return r.mayOwn(k) && ports.Contains(int(wirePort(k.Port)))
}

// mayOwn tells whether a vips key is of the service's VIP and protocol, within its ports' bounds.
func (r *serviceRecord) mayOwn(k sluiceVipKey) bool {
	p := wirePort(k.Port)
	return k.Addr == r.VIP && k.Family == r.Family && k.Proto == r.Proto && r.PortFirst <= p && p <= r.PortLast
}

// vipValue is the service's value in vips, for service id.
func (r *serviceRecord) vipValue(id uint32) sluiceService {
	v := sluiceService{Id: id, RingOffset: r.RingOffset, RingSize: r.RingSize, Mode: r.Mode, Fallback: r.Fallback}
	v.Flags = sluiceServiceFlags(r.Flags >> serviceFlagsShift)
	v.Source = r.source()
	if r.retired() {
		v.Flags |= sluiceServiceFlagsSERVICE_RETIRED
	}
	return v
}
