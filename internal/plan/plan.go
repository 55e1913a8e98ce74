// Package plan turns a validated config into what the datapaths program: per service, its backends
// and the slot table new flows are hashed or counted into. It is pure and shared by every datapath.
package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/maglev"
)

// Plan is the desired datapath state, services sorted by name.
type Plan struct {
	Datapath   config.Datapath
	Interfaces []string
	// NFTMaxElements is the most elements and objects the nft datapath may program (nft.max_elements).
	NFTMaxElements int
	Services       []Service
}

// Service is one virtual service ready to program.
type Service struct {
	Name        string
	VIP         netip.Addr
	Ports       config.PortList
	Protocol    config.Protocol
	Mode        config.Mode
	Scheduler   config.Scheduler
	Fallback    config.Fallback // never empty: the default when the config sets none
	FlowTimeout time.Duration   // idle timeout of DSR flow entries
	// SHPort adds the source port to the sh scheduler's hash.
	SHPort bool
	// Persistence is how long a client keeps its backend after its last new flow; 0 is off.
	Persistence time.Duration
	// PersistencePrefix is the prefix length that groups clients for persistence (32 or 128 for
	// one address).
	PersistencePrefix int
	// QuorumLost tells that the service's available weight is below its quorum: its backends
	// take no new flows (its sorry servers do, if it has any).
	QuorumLost bool
	// FullNATSource is the source address fullnat translates clients to; invalid: the address
	// of the interface towards the backends.
	FullNATSource netip.Addr
	// Tunnel is mode tunnel's encapsulation; empty for the other modes.
	Tunnel Tunnel
	// SYNProtection answers SYNs with cookies; Limits and LimitAction bound new and concurrent
	// connections (zero: no limit).
	SYNProtection bool
	Limits        config.Limits
	LimitAction   config.LimitAction
	// SourceAllow (when not empty) and SourceDeny are the client prefixes that may or may not
	// open new flows, sorted and without duplicates.
	SourceAllow, SourceDeny []netip.Prefix
	// Uncounted tells the nft datapath not to count the packets and bytes forwarded to the
	// backends of a nat or fullnat service (nft.packet_counters: false).
	Uncounted bool
	// KernelTimeouts tells the nft datapath to leave the new flows of a nat or fullnat service
	// the namespace's conntrack timeouts rather than Sluice's half-open policy
	// (nft.half_open_timeouts: false).
	KernelTimeouts bool
	// Replicated tells that the node replicates its flows to peers (the sync section): on nft,
	// conntrackd reads conntrack's events, and the service's TCP connections raise only those it
	// replicates.
	Replicated bool
	Backends   []Backend // every configured backend, weight 0 included
	// Slots maps a slot to an index in Backends; a new flow picks slot hash(5-tuple) mod len(Slots)
	// (maglev, hash) or counter mod len(Slots) (rr, wrr, random). Empty when no backend takes new flows.
	// Read-only: the plans of one Builder share it.
	Slots []int
}

// Tunnel is how a mode tunnel service encapsulates: the kind, GUE's destination port (0 for
// ipip), and the outer source (invalid: the address of the interface towards the backend).
type Tunnel struct {
	Kind    config.Tunnel
	GUEPort uint16
	Source  netip.Addr
}

// String renders the tunnel as an operator reads it: "ipip", "gue:6080 from 10.0.0.1".
func (t Tunnel) String() string {
	s := string(t.Kind)
	if t.GUEPort != 0 {
		s += ":" + strconv.Itoa(int(t.GUEPort))
	}
	if t.Source.IsValid() {
		s += " from " + t.Source.String()
	}
	return s
}

// Backend is one real server of a service.
type Backend struct {
	Addr   netip.Addr
	Port   uint16 // 0: the destination port the client used
	Weight int
	// MaxConns and MinConns are the connection thresholds: at MaxConns active flows the backend
	// takes no new flow until it is down to MinConns; 0 is no limit.
	MaxConns, MinConns int
}

// ID is the backend's stable identity, "10.0.0.1:80" or "[fd00::1]:80" (no port when Port is 0).
func (b Backend) ID() string {
	if b.Port == 0 {
		return b.Addr.String()
	}
	return netip.AddrPortFrom(b.Addr, b.Port).String()
}

// Listener renders "tcp 10.0.0.1:80" as an operator reads it.
func (s *Service) Listener() string {
	host := s.VIP.String()
	if s.VIP.Is6() {
		host = "[" + host + "]"
	}
	return string(s.Protocol) + " " + host + ":" + s.Ports.String()
}

// Availability tells whether a backend of a service may take new flows (it passes its health
// check); nil means every backend may.
type Availability func(service string, b Backend) bool

// QuorumRule tells whether a service with a quorum holds it when the backends that may take new
// flows weigh weight in all.
type QuorumRule func(s *config.Service, weight int) bool

// AtLeastQuorum is the QuorumRule without memory: the quorum is held at its value or more.
func AtLeastQuorum(s *config.Service, weight int) bool { return weight >= s.Quorum }

// Build computes the plan of a validated config. Backends that are not available get weight 0:
// they take no new flows and keep their established ones. When no backend of a service is left
// with a weight, its sorry servers (fallback: sorry) take the new flows.
func Build(cfg *config.Config, available Availability) (*Plan, error) {
	return NewBuilder().Build(cfg, available)
}

// Builder builds plans like Build and keeps each service's slot table for the next builds, so
// that a table is computed again only when its inputs (scheduler, table size, backends and their
// weights) changed. Plans built by one Builder share their Slots: they are read-only. A Builder
// is safe for concurrent use.
type Builder struct {
	mu     sync.Mutex
	tables map[string]*recentTables // by service name
	quorum QuorumRule
}

// NewBuilder returns a Builder that knows no table yet and applies AtLeastQuorum.
func NewBuilder() *Builder { return NewBuilderWithQuorum(AtLeastQuorum) }

// NewBuilderWithQuorum returns a Builder that decides quorum by rule (with its hysteresis).
func NewBuilderWithQuorum(rule QuorumRule) *Builder {
	return &Builder{tables: map[string]*recentTables{}, quorum: rule}
}

// Build is the package's Build, reusing the tables of the builds before.
func (b *Builder) Build(cfg *config.Config, available Availability) (*Plan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := make(map[string]*recentTables, len(cfg.Services))
	p := &Plan{Datapath: cfg.Datapath, Interfaces: cfg.Interfaces, NFTMaxElements: cfg.NFTMaxElements(),
		Services: make([]Service, 0, len(cfg.Services))}
	for _, cs := range cfg.Services {
		tables := b.tables[cs.Name]
		if tables == nil {
			tables = &recentTables{}
		}
		kept[cs.Name] = tables
		s, err := buildService(cs, available, b.quorum, tables, defaultTableSize(cfg.Datapath))
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", cs.Name, err)
		}
		s.Uncounted, s.KernelTimeouts, s.Replicated = !cfg.NFTPacketCounters(), !cfg.NFTHalfOpenTimeouts(), cfg.Sync != nil
		p.Services = append(p.Services, s)
	}
	b.tables = kept // forget the services that are gone
	p.Services = byName(p.Services)
	return p, nil
}

// byName is services sorted by name. It sorts their indices and copies each service once: a
// Service is large, and sorting 10,000 in place moved each of them many times.
func byName(services []Service) []Service {
	order := make([]int, len(services))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return strings.Compare(services[i].Name, services[j].Name) })
	sorted := make([]Service, len(services))
	for i, o := range order {
		sorted[i] = services[o]
	}
	return sorted
}

// recentTables are the last slot tables built for one service, most recent first: two, so that
// building the plans before and after a change of the service computes no table again.
type recentTables [2]struct {
	inputs string
	slots  []int
}

// get returns the table for inputs, computing it with build when it is not one of the recent.
func (r *recentTables) get(inputs string, build func() ([]int, error)) ([]int, error) {
	for _, t := range r {
		if t.slots != nil && t.inputs == inputs {
			return t.slots, nil
		}
	}
	slots, err := build()
	if err != nil || slots == nil {
		return slots, err
	}
	r[1] = r[0]
	r[0].inputs, r[0].slots = inputs, slots
	return slots, nil
}

// defaultTableSize is the Maglev table size of n backends on a datapath, when the service sets none:
// nftables holds each slot as a map element, which costs about 1 KB while nft loads it and a few
// hundred bytes in the kernel, so it gets compact tables; the eBPF datapath holds a slot in 4 bytes
// of an array, so it keeps the paper's size.
func defaultTableSize(datapath config.Datapath) func(n int) int {
	if datapath == config.DatapathEBPF {
		return maglev.DefaultSize
	}
	return maglev.CompactSize
}

func buildService(cs config.Service, available Availability, quorum QuorumRule, tables *recentTables, defaultSize func(int) int) (Service, error) {
	if !cs.VIP.IsValid() {
		return Service{}, fmt.Errorf("service %s: vip %q is not an IP address", cs.Name, cs.VIP)
	}
	s := Service{
		Name: cs.Name, VIP: cs.VIP.Unmap(), Ports: cs.AllPorts().Canonical(), Protocol: cs.Protocol, Mode: cs.Mode,
		Scheduler: cs.Scheduler.OrDefault().Canonical(), Fallback: cs.Fallback.OrDefault(), FlowTimeout: cs.FlowTimeout.Or(config.DefaultFlowTimeout),
		SHPort: cs.SHPort, Persistence: cs.PersistenceOrZero(), FullNATSource: cs.FullNATSource.Unmap(),
	}
	if cs.Mode == config.ModeTunnel {
		s.Tunnel = Tunnel{Kind: cmp.Or(cs.Tunnel, config.DefaultTunnel), Source: cs.TunnelSource.Unmap()}
		if s.Tunnel.Kind == config.TunnelGUE {
			s.Tunnel.GUEPort = uint16(cs.GUEPortOrDefault())
		}
	}
	if s.Persistence > 0 {
		s.PersistencePrefix = cs.PersistencePrefix(s.VIP.Is6())
	}
	err := s.protect(&cs)
	if err != nil {
		return Service{}, err
	}
	// configured holds each backend's weight before health is applied: the base of the table.
	var configured []int
	availableWeight := 0
	for _, cb := range cs.Backends {
		b, err := BackendOf(cb, cs.Mode)
		if err != nil {
			return Service{}, err
		}
		configured = append(configured, b.Weight)
		if available != nil && !available(cs.Name, b) {
			b.Weight = 0
		}
		availableWeight += b.Weight
		s.Backends = append(s.Backends, b)
	}
	if cs.Quorum > 0 && !quorum(&cs, availableWeight) {
		s.QuorumLost = true
		for i := range s.Backends {
			s.Backends[i].Weight = 0
		}
	}
	weighted := availableWeight > 0 && !s.QuorumLost
	for _, cb := range cs.SorryServers {
		b, err := BackendOf(cb, cs.Mode)
		if err != nil {
			return Service{}, err
		}
		configured = append(configured, 0)
		if weighted {
			b.Weight = 0
		}
		s.Backends = append(s.Backends, b)
	}
	order, ids := make([]int, len(s.Backends)), make([]string, len(s.Backends))
	for i, b := range s.Backends {
		order[i], ids[i] = i, b.ID()
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(ids[i], ids[j]) })
	sorted, sortedConfigured := make([]Backend, len(order)), make([]int, len(order))
	for i, o := range order {
		sorted[i], sortedConfigured[i] = s.Backends[o], configured[o]
	}
	s.Backends = sorted
	size := cs.TableSize
	if size == 0 && s.Scheduler.UsesTable() {
		// Every backend counts, drained and fallen ones too: draining or a health change never
		// resizes the table (which would move almost every flow's slot).
		size = defaultSize(len(s.Backends))
	}
	s.Slots, err = tables.get(slotInputs(s.Scheduler, s.Backends, sortedConfigured, size), func() ([]int, error) {
		return slots(s.Scheduler, s.Backends, sortedConfigured, size)
	})
	return s, err
}

// slotInputs is everything slots depends on, as text.
func slotInputs(scheduler config.Scheduler, backends []Backend, configured []int, tableSize int) string {
	buf := append([]byte(scheduler), ' ')
	buf = strconv.AppendInt(buf, int64(tableSize), 10)
	for i, b := range backends {
		buf = append(append(buf, ' '), b.ID()...)
		buf = strconv.AppendInt(append(buf, '='), int64(b.Weight), 10)
		buf = strconv.AppendInt(append(buf, '/'), int64(configured[i]), 10)
	}
	return string(buf)
}

// protect fills in the service's protection settings.
func (s *Service) protect(cs *config.Service) error {
	s.SYNProtection, s.LimitAction = cs.SYNProtection, cs.LimitAction.OrDefault()
	if cs.Limits != nil {
		s.Limits = *cs.Limits
	}
	var err error
	if s.SourceAllow, err = prefixes(cs.SourceAllow); err != nil {
		return err
	}
	s.SourceDeny, err = prefixes(cs.SourceDeny)
	return err
}

// prefixes is a source list sorted and without duplicates; nil when empty.
func prefixes(list []config.Prefix) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range list {
		if err := p.Err(); err != nil {
			return nil, err
		}
		out = append(out, p.Prefix)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out), nil
}

// BackendOf is a configured backend of a service in mode as the datapaths program it: dsr and
// tunnel cannot remap ports, so their backends always take the client's port (Port 0).
func BackendOf(cb config.Backend, mode config.Mode) (Backend, error) {
	if !cb.Address.IsValid() {
		return Backend{}, fmt.Errorf("backend %q is not an IP address", cb.Address)
	}
	port := uint16(cb.Port)
	if mode.Direct() {
		port = 0
	}
	upper, lower := cb.ConnectionThresholds()
	return Backend{Addr: cb.Address.Unmap(), Port: port, Weight: cb.WeightOrDefault(), MaxConns: upper, MinConns: lower}, nil
}

// slots builds the slot table of a scheduler over the backends' weights. For maglev, the table is
// built over the configured weights and only the slots of backends whose weight health took away
// are handed to the others, as a table without them would: no other backend's slot moves, and the
// slots return to the same backend when it comes back.
func slots(scheduler config.Scheduler, backends []Backend, configured []int, tableSize int) ([]int, error) {
	weights := make([]int, len(backends))
	for i, b := range backends {
		weights[i] = b.Weight
		if scheduler == config.SchedulerRR && b.Weight > 0 {
			weights[i] = 1
		}
	}
	if countPositive(weights) == 0 {
		return nil, nil
	}
	switch {
	case scheduler.CountsConnections():
		return takers(weights), nil
	case !scheduler.UsesTable():
		return interleave(weights), nil
	}
	m := tableSize
	table, err := maglevTable(backends, weights, m)
	if err != nil || slices.Equal(weights, configured) || countPositive(configured) == 0 {
		return table, err
	}
	base, err := maglevTable(backends, configured, m)
	if err != nil {
		return nil, err
	}
	base = slices.Clone(base) // maglev.Build's tables are shared: read-only
	for i, b := range base {
		if weights[b] == 0 {
			base[i] = table[i]
		}
	}
	return base, nil
}

func maglevTable(backends []Backend, weights []int, m int) ([]int, error) {
	mb := make([]maglev.Backend, len(backends))
	for i, b := range backends {
		mb[i] = maglev.Backend{ID: b.ID(), Weight: uint32(weights[i])}
	}
	return maglev.Build(mb, m)
}

// takers lists once each index whose weight is positive: the backends a counting scheduler
// compares for a new flow.
func takers(weights []int) []int {
	var out []int
	for i, w := range weights {
		if w > 0 {
			out = append(out, i)
		}
	}
	return out
}

func countPositive(weights []int) int {
	n := 0
	for _, w := range weights {
		if w > 0 {
			n++
		}
	}
	return n
}

// interleave spreads each index i over weights[i]/g slots (g the weights' gcd) in smooth weighted
// round-robin order, so a counter walking the slots never sends a burst to one backend.
func interleave(weights []int) []int {
	g := 0
	for _, w := range weights {
		g = gcd(g, w)
	}
	total := 0
	for i := range weights {
		weights[i] /= g
		total += weights[i]
	}
	out := make([]int, 0, total)
	current := make([]int, len(weights))
	for range total {
		best := -1
		for i, w := range weights {
			current[i] += w
			if w > 0 && (best < 0 || current[i] > current[best]) {
				best = i
			}
		}
		current[best] -= total
		out = append(out, best)
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Share returns each backend's fraction of the slots, by backend index.
func (s *Service) Share() []float64 {
	count := make([]int, len(s.Backends))
	for _, b := range s.Slots {
		count[b]++
	}
	share := make([]float64, len(s.Backends))
	if len(s.Slots) == 0 {
		return share // no backend takes new flows
	}
	for i, n := range count {
		share[i] = float64(n) / float64(len(s.Slots))
	}
	return share
}

// String summarises the service for logs.
func (s *Service) String() string {
	return s.Name + " " + s.Listener() + " " + string(s.Mode) + "/" + string(s.Scheduler) + " backends=" + strconv.Itoa(len(s.Backends))
}

// Backend finds a backend by "service/backend ID".
func (p *Plan) Backend(key string) (*Service, Backend, bool) {
	for i := range p.Services {
		s := &p.Services[i]
		for _, b := range s.Backends {
			if s.Name+"/"+b.ID() == key {
				return s, b, true
			}
		}
	}
	return nil, Backend{}, false
}
