// Package plan turns a validated config into what the datapaths program: per service, its backends
// and the slot table new flows are hashed or counted into. It is pure and shared by every datapath.
package plan

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/maglev"
)

// Plan is the desired datapath state, services sorted by name.
type Plan struct {
	Datapath   string
	Interfaces []string
	Services   []Service
}

// Service is one virtual service ready to program.
type Service struct {
	Name        string
	VIP         netip.Addr
	Ports       config.PortRange
	Protocol    string // "tcp" or "udp"
	Mode        string // "nat", "fullnat" or "dsr"
	Scheduler   string
	Fallback    string        // "drop" or "reject"
	FlowTimeout time.Duration // idle timeout of DSR flow entries
	Backends    []Backend     // every configured backend, weight 0 included
	// Slots maps a slot to an index in Backends; a new flow picks slot hash(5-tuple) mod len(Slots)
	// (maglev, hash) or counter mod len(Slots) (rr, wrr, random). Empty when no backend takes new flows.
	Slots []int
}

// Backend is one real server of a service.
type Backend struct {
	Addr   netip.Addr
	Port   uint16 // 0: the destination port the client used
	Weight int
}

// ID is the backend's stable identity, "10.0.0.1:80" or "[fd00::1]:80" (no port when Port is 0).
func (b Backend) ID() string {
	if b.Port == 0 {
		return b.Addr.String()
	}
	return netip.AddrPortFrom(b.Addr, b.Port).String()
}

// IsIPv6 tells the service's address family.
func (s *Service) IsIPv6() bool { return s.VIP.Is6() }

// Listener renders "tcp 10.0.0.1:80" as an operator reads it.
func (s *Service) Listener() string {
	host := s.VIP.String()
	if s.VIP.Is6() {
		host = "[" + host + "]"
	}
	return s.Protocol + " " + host + ":" + s.Ports.String()
}

// Build computes the plan of a validated config.
func Build(cfg *config.Config) (*Plan, error) {
	p := &Plan{Datapath: cfg.Datapath, Interfaces: cfg.Interfaces}
	for _, cs := range cfg.Services {
		s, err := buildService(cs)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", cs.Name, err)
		}
		p.Services = append(p.Services, s)
	}
	sort.Slice(p.Services, func(i, j int) bool { return p.Services[i].Name < p.Services[j].Name })
	return p, nil
}

func buildService(cs config.Service) (Service, error) {
	vip, err := netip.ParseAddr(cs.VIP)
	if err != nil {
		return Service{}, err
	}
	s := Service{
		Name: cs.Name, VIP: vip.Unmap(), Ports: cs.Port, Protocol: cs.Protocol, Mode: cs.Mode,
		Scheduler: cs.Scheduler, Fallback: cs.Fallback, FlowTimeout: config.DefaultFlowTimeout,
	}
	if s.Fallback == "" {
		s.Fallback = config.Fallbacks[0]
	}
	if cs.FlowTimeout != "" {
		if s.FlowTimeout, err = time.ParseDuration(cs.FlowTimeout); err != nil {
			return Service{}, err
		}
	}
	for _, cb := range cs.Backends {
		addr, err := netip.ParseAddr(cb.Address)
		if err != nil {
			return Service{}, err
		}
		port := uint16(cb.Port)
		if cs.Mode == "dsr" {
			port = 0
		}
		s.Backends = append(s.Backends, Backend{Addr: addr.Unmap(), Port: port, Weight: cb.WeightOrDefault()})
	}
	sort.Slice(s.Backends, func(i, j int) bool { return s.Backends[i].ID() < s.Backends[j].ID() })
	s.Slots, err = slots(s.Scheduler, s.Backends, cs.TableSize)
	return s, err
}

// slots builds the slot table of a scheduler over the backends.
func slots(scheduler string, backends []Backend, tableSize int) ([]int, error) {
	weights := make([]int, len(backends))
	active := 0
	for i, b := range backends {
		weights[i] = b.Weight
		if scheduler == "rr" && b.Weight > 0 {
			weights[i] = 1
		}
		if b.Weight > 0 {
			active++
		}
	}
	if active == 0 {
		return nil, nil
	}
	if scheduler != "maglev" {
		return interleave(weights), nil
	}
	mb := make([]maglev.Backend, len(backends))
	for i, b := range backends {
		mb[i] = maglev.Backend{ID: b.ID(), Weight: uint32(b.Weight)}
	}
	m := tableSize
	if m == 0 {
		m = maglev.DefaultSize(active)
	}
	return maglev.Build(mb, m)
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
	share := make([]float64, len(s.Backends))
	for _, b := range s.Slots {
		share[b] += 1 / float64(len(s.Slots))
	}
	return share
}

// String summarises the service for logs.
func (s *Service) String() string {
	return s.Name + " " + s.Listener() + " " + s.Mode + "/" + s.Scheduler + " backends=" + strconv.Itoa(len(s.Backends))
}
