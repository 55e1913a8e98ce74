package engine

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// ServiceView is one service as the daemon sees it: what the config asks for, what the kernel
// holds, and the health of each backend.
type ServiceView struct {
	Name      string           `json:"name"`
	Protocol  config.Protocol  `json:"protocol"`
	VIP       config.IP        `json:"vip"`
	Ports     string           `json:"ports"`
	Mode      config.Mode      `json:"mode"`
	Scheduler config.Scheduler `json:"scheduler"`
	// SHPort tells that the sh scheduler hashes the client's port too (IPVS sh-port).
	SHPort   bool            `json:"sh_port,omitempty"`
	Fallback config.Fallback `json:"fallback"`
	// Programmed tells whether the datapath holds the service.
	Programmed bool `json:"programmed"`
	// Slots is the size of the programmed slot table (0: new flows meet the fallback).
	Slots int `json:"slots"`
	// PersistenceTimeout is the session affinity ("300s"; empty: off) and PersistencePrefix the
	// prefix length its clients are grouped by.
	PersistenceTimeout config.Duration `json:"persistence_timeout,omitzero"`
	PersistencePrefix  int             `json:"persistence_prefix,omitempty"`
	// AvailableWeight is the total weight of the backends that may take new flows; Quorum is
	// "held" or "lost" for a service with a quorum, empty otherwise.
	AvailableWeight int    `json:"available_weight"`
	Quorum          string `json:"quorum,omitempty"`
	// Refused counts the new flows the service's access lists and limits refused, by setting.
	Refused datapath.Refusals `json:"refused,omitzero"`
	// Unforwarded counts the packets the datapath could not forward and dropped, by reason.
	Unforwarded datapath.Unforwarded `json:"unforwarded,omitzero"`
	// SYNCookies counts the SYN protection's cookies (syn_protection only).
	SYNCookies datapath.SYNCookies `json:"syn_cookies,omitzero"`
	// SecondChances counts the mid-flow segments without a flow sent to their slot's previous
	// backend (ebpf only).
	SecondChances uint64 `json:"second_chances,omitzero"`
	// Tunnel counts a mode tunnel service's packets by fate (docs/tunnel.md).
	Tunnel   datapath.TunnelCounts `json:"tunnel,omitzero"`
	Backends []BackendView         `json:"backends"`
}

// BackendView is one backend (or sorry server) of a service.
type BackendView struct {
	// ID is "address:port", or the address alone when the backend takes the client's port.
	ID      string `json:"id"`
	Address string `json:"address"`
	Port    int    `json:"port,omitempty"`
	// Weight is the configured weight; ProgrammedWeight what the datapath holds after health.
	Weight           int  `json:"weight"`
	ProgrammedWeight int  `json:"programmed_weight"`
	Sorry            bool `json:"sorry,omitempty"`
	// Health is "up", "down" or "unchecked"; State sums up: active, overloaded (at
	// max_connections), down, draining, drained, idle (weight 0), standby (a sorry server while
	// backends are up) or sorry (taking the flows).
	Health string     `json:"health"`
	State  string     `json:"state"`
	Drain  *DrainView `json:"drain,omitempty"`
	// Share is the backend's fraction of the slot table.
	Share       float64 `json:"share"`
	Flows       uint64  `json:"flows"`
	ActiveFlows uint64  `json:"active_flows"`
	// Packets and Bytes are absent where the datapath does not count them (nft.packet_counters).
	Packets *uint64 `json:"packets,omitempty"`
	Bytes   *uint64 `json:"bytes,omitempty"`
	// Connections is the active flow count the datapath picks by (ebpf: lc, wlc,
	// max_connections); MaxConnections and MinConnections are the thresholds (0: no limit).
	Connections    uint64 `json:"connections,omitempty"`
	MaxConnections int    `json:"max_connections,omitempty"`
	MinConnections int    `json:"min_connections,omitempty"`
}

// Services reads the datapath and describes every configured service.
func (e *Engine) Services(ctx context.Context) ([]ServiceView, error) {
	kernel, err := e.dp.Status(ctx)
	if err != nil {
		return nil, err
	}
	programmed := map[string]*datapath.ServiceStatus{}
	for i := range kernel {
		programmed[kernel[i].Name] = &kernel[i]
	}
	cfg := e.running()
	available := e.available(cfg)
	out := make([]ServiceView, 0, len(cfg.Services))
	for i := range cfg.Services {
		out = append(out, e.serviceView(&cfg.Services[i], programmed[cfg.Services[i].Name], available))
	}
	return out, nil
}

// Service reads the datapath and describes one configured service; a datapath that can read one
// service (datapath.ServiceReader) is not asked for the others.
func (e *Engine) Service(ctx context.Context, name string) (ServiceView, error) {
	return e.ServiceOf(ctx, nil, name)
}

// ServiceOf is Service for the service of cfg, a config a change made running, which a later
// change may have replaced already: the answer to a change describes what it did. A nil cfg is
// the running config.
func (e *Engine) ServiceOf(ctx context.Context, cfg *config.Config, name string) (ServiceView, error) {
	k, found, err := e.programmed(ctx, name)
	if err != nil {
		return ServiceView{}, err
	}
	if cfg == nil {
		cfg = e.running()
	}
	i := slices.IndexFunc(cfg.Services, func(s config.Service) bool { return s.Name == name })
	if i < 0 {
		return ServiceView{}, fmt.Errorf("service %q: %w", name, ErrNotFound)
	}
	programmed := &k
	if !found {
		programmed = nil
	}
	return e.serviceView(&cfg.Services[i], programmed, e.available(cfg)), nil
}

// programmed reads what the datapath holds of the named service; found is false when it holds
// none.
func (e *Engine) programmed(ctx context.Context, name string) (k datapath.ServiceStatus, found bool, err error) {
	if reader, ok := e.dp.(datapath.ServiceReader); ok {
		return reader.ServiceStatus(ctx, name)
	}
	kernel, err := e.dp.Status(ctx)
	if err != nil {
		return datapath.ServiceStatus{}, false, err
	}
	for _, k := range kernel {
		if k.Name == name {
			return k, true, nil
		}
	}
	return datapath.ServiceStatus{}, false, nil
}

func (e *Engine) serviceView(s *config.Service, k *datapath.ServiceStatus, available plan.Availability) ServiceView {
	v := ServiceView{
		Name: s.Name, Protocol: s.Protocol, VIP: s.VIP, Ports: s.AllPorts().String(), Mode: s.Mode,
		Scheduler: s.Scheduler, SHPort: s.SHPort, Fallback: s.Fallback.OrDefault(), Programmed: k != nil,
		AvailableWeight: availableWeight(s, available),
	}
	v.Quorum = e.quorum.state(s, v.AvailableWeight)
	if d := s.PersistenceOrZero(); d > 0 {
		v.PersistenceTimeout, v.PersistencePrefix = s.PersistenceTimeout, s.PersistencePrefix(s.VIP.Is6())
	}
	counters := map[string]datapath.BackendStatus{}
	if k != nil {
		v.Slots, v.Refused, v.Unforwarded, v.SYNCookies = k.Slots, k.Refused, k.Unforwarded, k.SYNCookies
		v.SecondChances, v.Tunnel = k.SecondChances, k.Tunnel
		for _, b := range k.Backends {
			counters[BackendID(b.Address, b.Port)] = b
		}
	}
	anyUp := false // a backend takes new flows: sorry servers stand by
	for _, b := range s.Backends {
		bv := e.backendView(s, b, counters, available)
		anyUp = anyUp || (bv.State == "active" || bv.State == "overloaded") && v.Quorum != QuorumLost
		v.Backends = append(v.Backends, bv)
	}
	for _, b := range s.SorryServers {
		bv := e.backendView(s, b, counters, nil)
		bv.Sorry, bv.State = true, "standby"
		if !anyUp {
			bv.State = "sorry"
		}
		v.Backends = append(v.Backends, bv)
	}
	return v
}

func (e *Engine) backendView(s *config.Service, b config.Backend, counters map[string]datapath.BackendStatus, available plan.Availability) BackendView {
	pb, _ := plan.BackendOf(b, s.Mode)
	k := counters[pb.ID()]
	v := BackendView{
		ID: pb.ID(), Address: pb.Addr.String(), Port: int(pb.Port), Weight: pb.Weight,
		ProgrammedWeight: k.Weight, Share: k.Share, Flows: k.Flows, ActiveFlows: k.ActiveFlows,
		Packets: k.Packets, Bytes: k.Bytes, Health: "unchecked", State: "active",
		Connections: k.Connections, MaxConnections: pb.MaxConns, MinConnections: pb.MinConns,
	}
	if s.CheckOf(&b) != nil && available != nil {
		v.Health = "up"
		if !available(s.Name, pb) {
			v.Health, v.State = "down", "down"
		}
	}
	if d := e.drains.view(s.Name + "/" + pb.ID()); d != nil {
		v.Drain, v.State = d, d.State
	} else if v.State == "active" && v.Weight == 0 {
		v.State = "idle"
	} else if v.State == "active" && k.Overloaded {
		v.State = "overloaded"
	}
	return v
}

// BackendID is plan.Backend.ID for an address and port as the datapath reports them.
func BackendID(addr string, port int) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr + ":" + strconv.Itoa(port)
	}
	return plan.Backend{Addr: a, Port: uint16(port)}.ID()
}
