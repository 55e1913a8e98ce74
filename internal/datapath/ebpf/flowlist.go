package ebpf

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Flows lists the entries of the flow table that belong to a service, read in batches and keeping
// only the flows within the limit. A flow is ACTIVE, CLOSING (its client sent a FIN or RST) or
// IDLE (no packet for its service's flow timeout; the LRU keeps it until it needs the space), and
// expires when it stops counting as active (see flowIsActive).
func (d *Datapath) Flows(ctx context.Context, service string, filter datapath.FlowFilter) (datapath.FlowList, error) {
	if err := ctx.Err(); err != nil {
		return datapath.FlowList{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.pinnedMaps()
	if err != nil {
		return datapath.FlowList{}, err
	}
	var svc *serviceState
	if m != nil {
		st := d.state
		if st == nil {
			if st, err = readState(m); err != nil {
				return datapath.FlowList{}, err
			}
		}
		svc = st.services[service]
	}
	if svc == nil || svc.rec.retired() {
		return datapath.FlowList{}, fmt.Errorf("service %q: %w", service, datapath.ErrNoService)
	}
	backends := map[uint32]plan.Backend{}
	for _, b := range svc.backends {
		backends[b.id] = b.rec.backend()
	}
	protocol := wireName(wireProtocols, svc.rec.Proto)
	timeout := uint64(svc.rec.FlowTimeout) * uint64(time.Second)
	now := monotonicNow()
	out := datapath.FlowList{Flows: []datapath.Flow{}}
	err = readAll(m.Flows, func(k sluiceFlowKey, f sluiceFlow) bool {
		b, ok := backends[f.BackendId]
		if f.ServiceId != svc.id || !ok {
			return true
		}
		vip := netip.AddrPortFrom(addrFromWire(k.Dst, k.Family), wirePort(k.Dport))
		flow := datapath.Flow{
			Protocol: protocol, Client: netip.AddrPortFrom(addrFromWire(k.Src, k.Family), wirePort(k.Sport)),
			VIP: vip, Backend: backendAt(b, vip.Port()), NATPort: wirePort(f.NatPort),
		}
		left := flowLeft(f.LastSeen, now, timeout)
		if flow.State = flowState(f, left); flow.State == "ACTIVE" {
			flow.ExpiresIn = roundUpSeconds(left)
		}
		if filter.Keeps(flow.Backend) {
			out.Total++
			if len(out.Flows) < filter.Limit {
				out.Flows = append(out.Flows, flow)
			}
		}
		return true
	})
	slices.SortFunc(out.Flows, func(a, b datapath.Flow) int { return a.Client.Compare(b.Client) })
	return out, err
}

// backendAt is where a backend takes a flow to VIP port vport: its port, or vport when it has none.
func backendAt(b plan.Backend, vport uint16) netip.AddrPort {
	if b.Port == 0 {
		return netip.AddrPortFrom(b.Addr, vport)
	}
	return netip.AddrPortFrom(b.Addr, b.Port)
}

// flowLeft is how long, in nanoseconds, a flow last seen at lastSeen still counts as active at now
// under a flow timeout; 0 once it is idle. A flow stamped after now (a packet came between the
// clock read and the map read) has its whole timeout left: no unsigned difference wraps.
func flowLeft(lastSeen, now, timeout uint64) uint64 {
	if lastSeen >= now {
		return timeout
	}
	if age := now - lastSeen; age < timeout {
		return timeout - age
	}
	return 0
}

// flowState names what a flow entry tells of its flow, with left from flowLeft.
func flowState(f sluiceFlow, left uint64) string {
	switch {
	case f.Flags&sluiceFlowFlagsFLOW_CLOSING != 0:
		return "CLOSING"
	case left == 0:
		return "IDLE"
	}
	return "ACTIVE"
}

// roundUpSeconds turns nanoseconds into whole seconds, rounded up and saturating.
func roundUpSeconds(ns uint64) uint32 {
	s := ns / uint64(time.Second)
	if ns%uint64(time.Second) != 0 {
		s++
	}
	return uint32(min(s, uint64(^uint32(0))))
}
