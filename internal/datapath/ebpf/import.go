package ebpf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Why ImportFlows skips a flow (datapath.ImportResult.Skipped).
const (
	skipInvalid   = "invalid"            // addresses of mixed families outside a tunnel, an unknown protocol
	skipNoService = "no such service"    // no live service here has the flow's listener
	skipNoBackend = "no such backend"    // the service has no backend of that address here
	skipNATSource = "another nat source" // fullnat to a source address the service does not use here, or a mode mismatch
	skipNATPort   = "nat port taken"     // a live fullnat flow of this node has that source port
	skipTracked   = "tracked here"       // this node saw a packet of the flow more recently
)

// ImportFlows writes flows peers replicated into the flow table as the program would have made
// them: the flows entry (last seen Idle ago on this node's clock) and for nat and fullnat the
// replies entry, so that the program finds an established flow and translates its replies with
// no lookup of its own. A flow this node saw a packet of more recently keeps its own entry; one
// this node tracks with an older entry takes the imported one. The backends' and services'
// connection counts follow through their lost counts (see recount), which only the loader
// writes, so nothing races the program's. See datapath.FlowReplicator.
func (d *Datapath) ImportFlows(ctx context.Context, flows []datapath.ReplicatedFlow) (datapath.ImportResult, error) {
	res := datapath.ImportResult{Skipped: map[string]int{}}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.pinnedMaps()
	if err != nil {
		return res, err
	}
	if m == nil {
		res.Skipped[skipNoService] = len(flows)
		return res, nil
	}
	st := d.state
	if st == nil {
		if st, err = readState(m); err != nil {
			return res, err
		}
	}
	im := newImporter(m, st)
	for i, f := range flows {
		if i%256 == 0 && ctx.Err() != nil {
			return res, ctx.Err()
		}
		why, err := im.flow(f)
		if err != nil {
			return res, err
		}
		if why == "" {
			res.Imported++
		} else {
			res.Skipped[why]++
		}
	}
	return res, nil
}

// importer writes replicated flows into the maps of state st.
type importer struct {
	m   *kernelMaps
	st  *state
	now uint64
	// backends are the valid backends by service id, address and record port, and by id.
	backends map[backendKey]*backendState
	byID     map[uint32]*backendState
}

// backendKey is a backend of a service by address and its record's port (0: the listener's).
type backendKey struct {
	service uint32
	addr    [16]byte
	family  uint8
	port    uint16
}

func newImporter(m *kernelMaps, st *state) *importer {
	im := &importer{m: m, st: st, now: monotonicNow(), backends: map[backendKey]*backendState{}, byID: map[uint32]*backendState{}}
	for _, s := range st.services {
		for _, b := range s.backends {
			if b.entry.Flags&sluiceBackendFlagsBACKEND_VALID != 0 {
				im.backends[backendKey{s.id, b.rec.Addr, b.rec.Family, b.rec.Port}] = b
				im.byID[b.id] = b
			}
		}
	}
	return im
}

// backend is service id's backend at a (port 0: the listener's port vport), or nil.
func (im *importer) backend(id uint32, a netip.AddrPort, vport uint16) *backendState {
	addr, family := wireAddr(a.Addr())
	port := a.Port()
	if port == 0 {
		port = vport
	}
	if b := im.backends[backendKey{id, addr, family, port}]; b != nil {
		return b
	}
	if port == vport {
		return im.backends[backendKey{id, addr, family, 0}]
	}
	return nil
}

// repliesBypass tells whether the replies of a mode's flows bypass the balancer, so that its flows
// have no replies entry: dsr and tunnel (the program's mode_direct).
func repliesBypass(m sluiceMode) bool { return m == sluiceModeMODE_DSR || m == sluiceModeMODE_TUNNEL }

// imported is a replicated flow as this node's maps hold it.
type imported struct {
	svc  *serviceState
	mode sluiceMode
	// nat is the fullnat source and port range the program uses for the service's flows.
	nat     sluiceGlobals
	backend *backendState
	key     sluiceFlowKey
	flow    sluiceFlow
	// reply is the replies entry's key and value (nat and fullnat).
	replyKey sluiceFlowKey
	reply    sluiceReverse
	// foreign is the source another node translated a fullnat flow to, when not this node's
	// (the flow has FLOW_FOREIGN_SOURCE and an entry in flow_sources).
	foreign netip.Addr
}

// flow writes one replicated flow; it returns why it skipped it ("" when it wrote it).
func (im *importer) flow(f datapath.ReplicatedFlow) (string, error) {
	in, why := im.resolve(f)
	if why != "" {
		return why, nil
	}
	var cur sluiceFlow
	have := im.m.Flows.Lookup(in.key, &cur) == nil
	if have && cur.LastSeen > in.flow.LastSeen {
		return skipTracked, nil
	}
	if in.foreign.IsValid() {
		addr, _ := wireAddr(in.foreign)
		if err := im.m.FlowSources.Put(in.key, sluiceFlowSource{Addr: addr}); err != nil {
			return "", fmt.Errorf("writing flow_sources: %w", err)
		}
	}
	if !repliesBypass(in.mode) {
		if taken, err := im.replyTaken(in); err != nil || taken {
			return skipNATPort, err
		}
		if err := im.m.Replies.Put(in.replyKey, in.reply); err != nil {
			return "", fmt.Errorf("writing replies: %w", err)
		}
	}
	flags := ebpf.UpdateNoExist
	if have {
		flags = ebpf.UpdateExist
		if cur.BackendId == in.flow.BackendId && cur.NatPort == in.flow.NatPort {
			in.flow.Flags |= cur.Flags & sluiceFlowFlagsFLOW_CLOSING
		}
	}
	err := im.m.Flows.Update(in.key, in.flow, flags)
	if errors.Is(err, ebpf.ErrKeyExist) || errors.Is(err, ebpf.ErrKeyNotExist) {
		return skipTracked, nil // the program made or the LRU dropped it meanwhile
	}
	if err != nil {
		return "", fmt.Errorf("writing flows: %w", err)
	}
	if have {
		if err := im.forgetReply(in, cur); err != nil {
			return "", err
		}
	}
	return "", im.count(in, cur, have)
}

// resolve turns a replicated flow into this node's ids and entries; it returns why it cannot.
func (im *importer) resolve(f datapath.ReplicatedFlow) (imported, string) {
	var in imported
	proto, ok := wireProtocols[f.Protocol]
	client, listener, backend := unmapped(f.Client), unmapped(f.Listener), unmapped(f.Backend)
	is4 := client.Addr().Is4()
	if !ok || !client.IsValid() || !listener.IsValid() || !backend.Addr().IsValid() || f.Idle < 0 ||
		listener.Addr().Is4() != is4 {
		return in, skipInvalid
	}
	v, ok := im.st.vips[vipKeyOf(listener.Addr(), listener.Port(), proto)]
	if in.svc = im.st.byID[v.Id]; !ok || in.svc == nil || v.Flags&sluiceServiceFlagsSERVICE_RETIRED != 0 {
		return in, skipNoService
	}
	in.mode = v.Mode
	if backend.Addr().Is4() != is4 && in.mode != sluiceModeMODE_TUNNEL { // only tunnels cross families
		return in, skipInvalid
	}
	in.nat = natSettings(im.st.globals, in.svc.source, v.Source)
	if in.backend = im.backend(v.Id, backend, listener.Port()); in.backend == nil {
		return in, skipNoBackend
	}
	in.key = flowKeyOf(client, listener, proto)
	in.flow = sluiceFlow{BackendId: in.backend.id, ServiceId: v.Id, LastSeen: lastSeenAgo(im.now, f.Idle)}
	if f.Closing {
		in.flow.Flags = sluiceFlowFlagsFLOW_CLOSING
	}
	if why := im.natSource(&in, unmapped(f.NATSource)); why != "" {
		return in, why
	}
	if !repliesBypass(in.mode) {
		in.replyKey, in.reply = im.replyOf(in, client, listener)
	}
	return in, ""
}

// natSource checks a replicated flow's NAT source and takes its port: a fullnat flow comes from
// the service's source address here (its fullnat_source, or this node's) and port range, or from
// another node's own source (a fullnat fleet: docs/scale-out.md), which the flow keeps in
// flow_sources; others from none.
func (im *importer) natSource(in *imported, src netip.AddrPort) string {
	if in.mode != sluiceModeMODE_FULLNAT {
		if src.IsValid() {
			return skipNATSource
		}
		return ""
	}
	g := in.nat
	own, ok := snatOf(g, in.key.Family)
	if !ok || !src.IsValid() || src.Port() == 0 || src.Addr().Is4() != own.Is4() || src.Addr().IsUnspecified() {
		return skipNATSource
	}
	if src.Addr() != own {
		if im.m.FlowSources == nil {
			return skipNATSource // pins made before flow_sources, not reloaded yet
		}
		in.foreign = src.Addr()
		in.flow.Flags |= sluiceFlowFlagsFLOW_FOREIGN_SOURCE
	} else if src.Port() < g.PortLow || src.Port() > g.PortHigh {
		return skipNATSource
	}
	in.flow.NatPort = wirePort(src.Port())
	return ""
}

// replyOf is the replies entry of a nat or fullnat flow, as the program's reply_key and
// reverse_of make it.
func (im *importer) replyOf(in imported, client, listener netip.AddrPort) (sluiceFlowKey, sluiceReverse) {
	b := in.backend.rec
	port := b.Port
	if port == 0 {
		port = listener.Port()
	}
	to := client
	if in.mode == sluiceModeMODE_FULLNAT {
		src, _ := snatOf(in.nat, in.key.Family)
		if in.foreign.IsValid() {
			src = in.foreign
		}
		to = netip.AddrPortFrom(src, wirePort(in.flow.NatPort))
	}
	k := flowKeyOf(netip.AddrPortFrom(addrFromWire(b.Addr, b.Family), port), to, in.key.Proto)
	r := sluiceReverse{
		Vip: in.key.Dst, Client: in.key.Src, Vport: in.key.Dport, Cport: in.key.Sport,
		ServiceId: in.flow.ServiceId, BackendId: in.flow.BackendId,
	}
	return k, r
}

// replyTaken tells whether a fullnat flow's replies entry belongs to another flow of this node
// that still holds its source port (the program's reply_reusable, in reverse).
func (im *importer) replyTaken(in imported) (bool, error) {
	if in.mode != sluiceModeMODE_FULLNAT {
		return false, nil
	}
	var r sluiceReverse
	err := im.m.Replies.Lookup(in.replyKey, &r)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading replies: %w", err)
	}
	if r.Client == in.reply.Client && r.Cport == in.reply.Cport && r.Vip == in.reply.Vip && r.Vport == in.reply.Vport {
		return false, nil
	}
	owner := sluiceFlowKey{Src: r.Client, Dst: r.Vip, Sport: r.Cport, Dport: r.Vport, Proto: in.key.Proto, Family: in.key.Family}
	var f sluiceFlow
	if err := im.m.Flows.Lookup(owner, &f); err != nil {
		return false, nil
	}
	return f.BackendId == r.BackendId && f.NatPort == in.replyKey.Dport && !olderThan(im.now, f.LastSeen, fullnatIdle), nil
}

// fullnatIdle is the program's FULLNAT_IDLE_NS: a fullnat flow idle this long gives up its port.
const fullnatIdle = 120 * time.Second

// olderThan tells whether a time on the monotonic clock lies more than d before now.
func olderThan(now, at uint64, d time.Duration) bool {
	return at < now && now-at >= uint64(d)
}

// forgetReply deletes the replies entry of the flow an import replaced, if it was another one's
// and is still that flow's.
func (im *importer) forgetReply(in imported, old sluiceFlow) error {
	b := im.byID[old.BackendId]
	if b == nil || (old.BackendId == in.flow.BackendId && old.NatPort == in.flow.NatPort) || repliesBypass(in.mode) {
		return nil
	}
	was := in
	was.backend, was.flow.BackendId, was.flow.ServiceId, was.flow.NatPort = b, old.BackendId, old.ServiceId, old.NatPort
	client := netip.AddrPortFrom(addrFromWire(in.key.Src, in.key.Family), wirePort(in.key.Sport))
	listener := netip.AddrPortFrom(addrFromWire(in.key.Dst, in.key.Family), wirePort(in.key.Dport))
	k, r := im.replyOf(was, client, listener)
	var got sluiceReverse
	if im.m.Replies.Lookup(k, &got) != nil || got != r {
		return nil
	}
	w := writer{}
	return w.delete(im.m.Replies, k)
}

// count keeps the program's connection counts right across an import: the active flows of the
// backends of counting services and of limited services change by what the import made active or
// not (an old entry replaced, a flow closing). They change through the lost counts, which only
// the loader writes; the clients of limited services are left to the next recount.
func (im *importer) count(in imported, old sluiceFlow, had bool) error {
	rec := &in.svc.rec
	delta := map[uint32]int64{}
	if had && flowIsActive(old, im.now, rec) {
		delta[old.BackendId]--
	}
	if flowIsActive(in.flow, im.now, rec) {
		delta[in.flow.BackendId]++
	}
	var service int64
	for id, n := range delta {
		service += n
		if rec.counted() && n != 0 {
			if err := addActive(im.m.BackendLost, id, n); err != nil {
				return err
			}
		}
	}
	if rec.limited() && service != 0 {
		return addActive(im.m.ServiceLost, in.svc.id, service)
	}
	return nil
}

// addActive adds n active flows to what the program counts for an id of a lost map, by taking
// them from its lost count.
func addActive(lost *ebpf.Map, id uint32, n int64) error {
	if lost == nil {
		return nil
	}
	var was uint64
	if err := lost.Lookup(id, &was); err != nil {
		return err
	}
	w := writer{}
	return w.put(lost, id, was-uint64(n))
}

// lastSeenAgo is the monotonic time idle before now, 0 at the earliest (a young uptime).
func lastSeenAgo(now uint64, idle time.Duration) uint64 {
	if uint64(idle) >= now {
		return 0
	}
	return now - uint64(idle)
}

// unmapped is an address and port with an IPv4-mapped IPv6 address turned into IPv4.
func unmapped(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}
