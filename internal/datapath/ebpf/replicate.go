package ebpf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Flow replication, the datapath's side (see datapath.FlowReplicator). While WatchFlows runs, the
// program hands each flow it creates, and each flow whose client sends a FIN or RST, to the
// flow_events ring (config's flow_events set; nothing per established packet, and a full ring
// counts a drop instead of waiting), and a goroutine drains it as soon as a record arrives, at
// most once every flowEventsPause, naming ids by the records. SnapshotFlows walks the flow table; ImportFlows (import.go) writes peers' flows.

var _ datapath.FlowReplicator = (*Datapath)(nil)

// How WatchFlows reads flow_events. The ring wakes its reader only for the first record after
// the reader has read everything (the kernel's adaptive wake-up), so a lone new flow is read at
// once: it leaves for the peers within tens of microseconds of its first packet, and a node that
// dies a moment after a connection began has handed it over all the same. After each drain the
// reader pauses flowEventsPause, which bounds the wake-ups under a flood of new flows (their
// records wait in the ring meanwhile, with no wake-up each) and makes a replicated flow at most
// that much late. flowEventsWait bounds a wait for a first record, so that the watcher notices
// its context's end and maps made anew.
const (
	flowEventsPause = 2 * time.Millisecond
	flowEventsWait  = 100 * time.Millisecond
)

// flowEventsBatch is the most flows one emit of WatchFlows carries.
const flowEventsBatch = 1024

// flowEvent is struct flow_event: a flow the program created or saw closing.
type flowEvent struct {
	Key  sluiceFlowKey
	Flow sluiceFlow
}

// decodeFlowEvent copies a flow_events sample into ev, false when it is too short. The types are
// the program's own layout (bpf2go, host layout), so the sample's bytes are ev's: a copy, where
// binary.Decode's reflection took a third of a replicating daemon's CPU under a flood of new
// flows.
func decodeFlowEvent(sample []byte, ev *flowEvent) bool {
	size := int(unsafe.Sizeof(*ev))
	if len(sample) < size {
		return false
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(ev)), size), sample)
	return true
}

// replicaMaps are duplicates of the maps a replicator reads, so that it reads them without the
// datapath's lock and they stay valid when Flush or Close release the datapath's own.
type replicaMaps struct {
	of                                        *kernelMaps // the maps they duplicate
	events, flows, services, backends, config *ebpf.Map   // events: nil in pins made before it
	sources                                   *ebpf.Map   // service_sources: nil in pins made before it
	flowSources                               *ebpf.Map   // flow_sources: nil in pins made before it
}

// cloneReplicaMaps duplicates the maps of m a replicator reads.
func cloneReplicaMaps(m *kernelMaps) (*replicaMaps, error) {
	r := &replicaMaps{of: m}
	for _, c := range []struct {
		from *ebpf.Map
		to   **ebpf.Map
	}{{m.FlowEvents, &r.events}, {m.Flows, &r.flows}, {m.ServiceMeta, &r.services}, {m.BackendMeta, &r.backends}, {m.Config, &r.config}, {m.ServiceSources, &r.sources}, {m.FlowSources, &r.flowSources}} {
		if c.from == nil {
			continue
		}
		x, err := c.from.Clone()
		if err != nil {
			return nil, errors.Join(err, r.Close())
		}
		*c.to = x
	}
	return r, nil
}

// Close closes the duplicates.
func (r *replicaMaps) Close() error {
	var errs []error
	for _, m := range []*ebpf.Map{r.events, r.flows, r.services, r.backends, r.config, r.sources, r.flowSources} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// flowNamer names flows by addresses: backend ids by backend_meta, service ids by service_meta,
// fullnat ports by their service's source address (service_sources) or this node's (config),
// each read once in its life.
type flowNamer struct {
	m        *replicaMaps
	globals  sluiceGlobals
	backends map[uint32]*backendRecord // nil: no record
	services map[uint32]*serviceRecord
	sources  map[uint32]sluiceGlobals // the services' own fullnat sources
}

// newFlowNamer reads config and starts with no record read.
func newFlowNamer(m *replicaMaps) (*flowNamer, error) {
	n := &flowNamer{m: m, backends: map[uint32]*backendRecord{}, services: map[uint32]*serviceRecord{}, sources: map[uint32]sluiceGlobals{}}
	return n, m.config.Lookup(uint32(0), &n.globals)
}

// nat is the fullnat source and port range of service id's flows: the service's own when its
// record says it has one (none when the pins lack service_sources), else this node's.
func (n *flowNamer) nat(id uint32) sluiceGlobals {
	rec := n.service(id)
	if rec == nil || rec.source() != sluiceServiceSourceSOURCE_OWN {
		return n.globals
	}
	g, seen := n.sources[id]
	if !seen && n.m.sources != nil {
		_ = n.m.sources.Lookup(id, &g) // unread: zero, a flow named by no source
		n.sources[id] = g
	}
	return g
}

// backend is the record of backend id, or nil.
func (n *flowNamer) backend(id uint32) *backendRecord { return readOnce(n.backends, n.m.backends, id) }

// service is the record of service id, or nil.
func (n *flowNamer) service(id uint32) *serviceRecord { return readOnce(n.services, n.m.services, id) }

// readOnce is the record of id in m, looked up the first time only and kept in read (nil: m has
// none).
func readOnce[R any](read map[uint32]*R, m *ebpf.Map, id uint32) *R {
	rec, seen := read[id]
	if !seen {
		var r R
		if m.Lookup(id, &r) == nil {
			rec = &r
		}
		read[id] = rec
	}
	return rec
}

// crossFamily tells whether service id may have backends of another family than its VIP's: a
// tunnel service, which carries IPv6 in IPv4 and IPv4 in IPv6.
func (n *flowNamer) crossFamily(id uint32) bool {
	rec := n.service(id)
	return rec != nil && rec.Mode == sluiceModeMODE_TUNNEL
}

// name is flows entry f of key k at now by addresses; false when its backend or protocol is not
// known (an entry the records do not explain).
func (n *flowNamer) name(k sluiceFlowKey, f sluiceFlow, now uint64) (datapath.ReplicatedFlow, bool) {
	proto := wireName(wireProtocols, k.Proto)
	b := n.backend(f.BackendId)
	if proto == "" || b == nil || (b.Family != k.Family && !n.crossFamily(f.ServiceId)) {
		return datapath.ReplicatedFlow{}, false
	}
	rf := datapath.ReplicatedFlow{
		Protocol: proto,
		Client:   netip.AddrPortFrom(addrFromWire(k.Src, k.Family), wirePort(k.Sport)),
		Listener: netip.AddrPortFrom(addrFromWire(k.Dst, k.Family), wirePort(k.Dport)),
		Backend:  netip.AddrPortFrom(addrFromWire(b.Addr, b.Family), b.Port),
		Closing:  f.Flags&sluiceFlowFlagsFLOW_CLOSING != 0,
	}
	if f.LastSeen < now {
		rf.Idle = time.Duration(now - f.LastSeen)
	}
	if f.NatPort != 0 {
		src, ok := n.source(k, f)
		if !ok {
			return datapath.ReplicatedFlow{}, false
		}
		rf.NATSource = netip.AddrPortFrom(src, wirePort(f.NatPort))
	}
	return rf, true
}

// source is the fullnat source address of flow k: the one another node gave it (flow_sources),
// or its service's here; false when there is none.
func (n *flowNamer) source(k sluiceFlowKey, f sluiceFlow) (netip.Addr, bool) {
	if f.Flags&sluiceFlowFlagsFLOW_FOREIGN_SOURCE != 0 {
		var s sluiceFlowSource
		if n.m.flowSources == nil || n.m.flowSources.Lookup(k, &s) != nil {
			return netip.Addr{}, false
		}
		a := addrFromWire(s.Addr, k.Family)
		return a, !a.IsUnspecified()
	}
	return snatOf(n.nat(f.ServiceId), k.Family)
}

// snatOf is the fullnat source address config holds for a family; false when it holds none.
func snatOf(g sluiceGlobals, family uint8) (netip.Addr, bool) {
	var w [16]byte
	if family == unix.AF_INET {
		copy(w[:], g.Snat4[:])
	} else {
		w = g.Snat6
	}
	a := addrFromWire(w, family)
	return a, !a.IsUnspecified()
}

// WatchFlows has the program hand its new and closing flows to flow_events and calls emit with
// them, named by addresses, as they come (see flowEventsPause) until ctx ends; see
// datapath.FlowReplicator.
// It loads the program if no Apply did yet. One watcher at a time: the ring has one reader.
// Events the full ring lost are counted (LostFlows); a peer learns those flows from its
// next full resync (SnapshotFlows).
func (d *Datapath) WatchFlows(ctx context.Context, emit func([]datapath.ReplicatedFlow)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watching {
		return errors.New("the flows are watched already")
	}
	if err := d.load(); err != nil {
		return err
	}
	rm, rd, err := openFlowEvents(d.maps)
	if err != nil {
		return err
	}
	if err := d.setFlowEvents(true); err != nil {
		return errors.Join(err, rd.Close(), rm.Close())
	}
	d.watching = true
	go d.watchFlows(ctx, rm, rd, emit)
	return nil
}

// openFlowEvents duplicates the maps a watcher reads and opens a reader of flow_events.
func openFlowEvents(m *kernelMaps) (*replicaMaps, *ringbuf.Reader, error) {
	if m.FlowEvents == nil {
		return nil, nil, errors.New("the pinned maps have no flow_events: a version before flow replication made them")
	}
	rm, err := cloneReplicaMaps(m)
	if err != nil {
		return nil, nil, err
	}
	rd, err := ringbuf.NewReader(rm.events)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("reading flow_events: %w", err), rm.Close())
	}
	return rm, rd, nil
}

// setFlowEvents sets or clears config's flow_events in the maps the datapath holds and in what
// Apply compares with.
func (d *Datapath) setFlowEvents(on bool) error {
	g, err := putFlowEvents(d.maps.Config, on)
	if err == nil && d.state != nil {
		d.state.globals.FlowEvents = g.FlowEvents
	}
	return err
}

// putFlowEvents sets or clears flow_events in a config map and returns its entry.
func putFlowEvents(config *ebpf.Map, on bool) (sluiceGlobals, error) {
	var g sluiceGlobals
	if err := config.Lookup(uint32(0), &g); err != nil {
		return g, err
	}
	g.FlowEvents = 0
	if on {
		g.FlowEvents = 1
	}
	if err := config.Put(uint32(0), g); err != nil {
		return g, fmt.Errorf("writing config: %w", err)
	}
	return g, nil
}

// watchFlows drains flow_events until ctx ends, then has the program stop handing flows to it.
func (d *Datapath) watchFlows(ctx context.Context, rm *replicaMaps, rd *ringbuf.Reader, emit func([]datapath.ReplicatedFlow)) {
	for ctx.Err() == nil {
		if err := drainFlowEvents(rm, rd, emit); err != nil {
			d.log.Warn("ebpf: reading flow events", "err", err)
		}
		rm, rd = d.followMaps(rm, rd)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.watching = false
	// the maps read, which Close may have left this process holding alone, and the ones held
	_, err := putFlowEvents(rm.config, false)
	if d.maps != nil && d.maps != rm.of {
		err = errors.Join(err, d.setFlowEvents(false))
	} else if d.state != nil {
		d.state.globals.FlowEvents = 0
	}
	if err = errors.Join(err, rd.Close(), rm.Close()); err != nil {
		d.log.Warn("ebpf: turning flow events off", "err", err)
	}
}

// drainFlowEvents waits up to flowEventsWait for a record in flow_events, then reads every
// record there and emits them in batches, and pauses flowEventsPause.
func drainFlowEvents(rm *replicaMaps, rd *ringbuf.Reader, emit func([]datapath.ReplicatedFlow)) error {
	var rec ringbuf.Record
	rd.SetDeadline(time.Now().Add(flowEventsWait))
	if err := rd.ReadInto(&rec); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		return err
	}
	namer, err := newFlowNamer(rm)
	if err != nil {
		return err
	}
	now := monotonicNow()
	var batch []datapath.ReplicatedFlow
	var ev flowEvent
	rd.SetDeadline(time.Now()) // from here on, what is there already, without waiting
	for {
		if decodeFlowEvent(rec.RawSample, &ev) {
			if rf, ok := namer.name(ev.Key, ev.Flow, now); ok {
				batch = append(batch, rf)
			}
		}
		if len(batch) == flowEventsBatch {
			emit(batch)
			batch = nil
		}
		err := rd.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return err
		}
	}
	if len(batch) > 0 {
		emit(batch)
	}
	time.Sleep(flowEventsPause)
	return nil
}

// followMaps moves a watcher to the maps the datapath holds when they are no longer the ones it
// reads (Flush, then Apply, made them anew); it keeps the ones it has when the datapath is busy
// or holds none.
func (d *Datapath) followMaps(rm *replicaMaps, rd *ringbuf.Reader) (*replicaMaps, *ringbuf.Reader) {
	if !d.mu.TryLock() {
		return rm, rd
	}
	defer d.mu.Unlock()
	if d.maps == nil || d.maps == rm.of || d.maps.FlowEvents == nil {
		return rm, rd
	}
	nrm, nrd, err := openFlowEvents(d.maps)
	if err != nil {
		d.log.Warn("ebpf: following the new maps for flow events", "err", err)
		return rm, rd
	}
	_ = rd.Close()
	_ = rm.Close()
	return nrm, nrd
}

// LostFlows is how many new or closing flows the program could not hand to a full
// flow_events since the maps were made: flows the peers learn only from a full resync.
func (d *Datapath) LostFlows(context.Context) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.pinnedMaps()
	if m == nil || m.FlowEventDrops == nil {
		return 0, err
	}
	var per []uint64
	if err := m.FlowEventDrops.Lookup(uint32(0), &per); err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range per {
		n += c
	}
	return n, nil
}

// SnapshotFlows calls fn with every active flow (see flowIsActive), named by addresses, until fn
// returns false or ctx ends; see datapath.FlowReplicator. It reads duplicates of the maps, so
// that neither the walk nor fn holds Apply up.
func (d *Datapath) SnapshotFlows(ctx context.Context, fn func(datapath.ReplicatedFlow) bool) error {
	d.mu.Lock()
	m, err := d.pinnedMaps()
	if m == nil {
		d.mu.Unlock()
		return err
	}
	rm, err := cloneReplicaMaps(m)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	defer rm.Close()
	namer, err := newFlowNamer(rm)
	if err != nil {
		return err
	}
	now := monotonicNow()
	err = readAll(rm.flows, func(k sluiceFlowKey, f sluiceFlow) bool {
		if ctx.Err() != nil {
			return false
		}
		svc := namer.service(f.ServiceId)
		if svc == nil || !flowIsActive(f, now, svc) {
			return true
		}
		rf, ok := namer.name(k, f, now)
		return !ok || fn(rf)
	})
	return errors.Join(err, ctx.Err())
}
