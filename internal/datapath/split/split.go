// Package split is a datapath made of two: the services a predicate selects go to the second,
// the others to the first. The ebpf datapath hands its services with syn_protection to the nft
// datapath this way: the kernel's synproxy answers their SYNs, and the BPF program, which finds
// no VIP entry for them, leaves their packets to the stack.
package split

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Datapath sends each service of a plan to one of two datapaths.
type Datapath struct {
	first, second datapath.Datapath
	// toSecond selects the services the second datapath programs.
	toSecond func(*plan.Service) bool

	mu sync.Mutex
	// inSecond names the services the last Apply gave the second datapath.
	inSecond map[string]bool
	// secondEmpty tells that the second datapath was flushed and given nothing since.
	secondEmpty bool
}

var (
	_ datapath.Datapath         = (*Datapath)(nil)
	_ datapath.Watcher          = (*Datapath)(nil)
	_ datapath.ServiceReader    = (*Datapath)(nil)
	_ datapath.Budgeter         = (*Datapath)(nil)
	_ datapath.FlowLister       = (*Datapath)(nil)
	_ datapath.StaleFlowDropper = (*Datapath)(nil)
	_ datapath.ConntrackReader  = (*Datapath)(nil)
)

// New returns the datapath that programs the services toSecond selects with second, the others
// with first.
func New(first, second datapath.Datapath, toSecond func(*plan.Service) bool) *Datapath {
	return &Datapath{first: first, second: second, toSecond: toSecond, inSecond: map[string]bool{}}
}

// First is the datapath of the services toSecond does not select.
func (d *Datapath) First() datapath.Datapath { return d.first }

// divide splits a plan into the two datapaths' plans.
func (d *Datapath) divide(p *plan.Plan) (first, second *plan.Plan) {
	a, b := *p, *p
	a.Services, b.Services = nil, nil
	for i := range p.Services {
		if d.toSecond(&p.Services[i]) {
			b.Services = append(b.Services, p.Services[i])
		} else {
			a.Services = append(a.Services, p.Services[i])
		}
	}
	return &a, &b
}

// Apply programs each half of the plan into its datapath: the second first, so that a service
// moving from the first (its VIP entry goes) is served by the second's rules before it leaves
// the first. A second datapath without services is flushed, once.
func (d *Datapath) Apply(ctx context.Context, p *plan.Plan) error {
	first, second := d.divide(p)
	d.mu.Lock()
	empty := d.secondEmpty
	d.mu.Unlock()
	var err error
	switch {
	case len(second.Services) > 0:
		err = d.second.Apply(ctx, second)
	case !empty:
		err = d.second.Flush(ctx)
	}
	if err != nil {
		return err
	}
	if err := d.first.Apply(ctx, first); err != nil {
		return err
	}
	in := make(map[string]bool, len(second.Services))
	for _, s := range second.Services {
		in[s.Name] = true
	}
	d.mu.Lock()
	d.inSecond, d.secondEmpty = in, len(in) == 0
	d.mu.Unlock()
	return nil
}

// Resync has both datapaths compare with the kernel at their next Apply (an empty second one
// is flushed again: others may have programmed it).
func (d *Datapath) Resync() {
	d.first.Resync()
	d.second.Resync()
	d.mu.Lock()
	d.secondEmpty = false
	d.mu.Unlock()
}

// Status lists both datapaths' services.
func (d *Datapath) Status(ctx context.Context) ([]datapath.ServiceStatus, error) {
	a, err := d.first.Status(ctx)
	if err != nil {
		return nil, err
	}
	b, err := d.second.Status(ctx)
	if err != nil {
		return nil, err
	}
	all := slices.Concat(a, b)
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

// Flush empties both datapaths.
func (d *Datapath) Flush(ctx context.Context) error {
	err := errors.Join(d.first.Flush(ctx), d.second.Flush(ctx))
	d.mu.Lock()
	d.inSecond, d.secondEmpty = map[string]bool{}, err == nil
	d.mu.Unlock()
	return err
}

// holder is the datapath that programs the named service.
func (d *Datapath) holder(service string) datapath.Datapath {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inSecond[service] {
		return d.second
	}
	return d.first
}

// ResetFlows resets the flows in the datapath that holds the service.
func (d *Datapath) ResetFlows(ctx context.Context, s *plan.Service, b plan.Backend) (int, error) {
	return d.holder(s.Name).ResetFlows(ctx, s, b)
}

// DropStaleFlows drops stale flows where the holding datapath can; none elsewhere.
func (d *Datapath) DropStaleFlows(ctx context.Context, s *plan.Service, b plan.Backend) (int, error) {
	if dropper, ok := d.holder(s.Name).(datapath.StaleFlowDropper); ok {
		return dropper.DropStaleFlows(ctx, s, b)
	}
	return 0, nil
}

// ServiceStatus reads the service from the datapath that holds it, or from either when no Apply
// said which.
func (d *Datapath) ServiceStatus(ctx context.Context, name string) (datapath.ServiceStatus, bool, error) {
	for _, dp := range []datapath.Datapath{d.holder(name), d.first, d.second} {
		st, found, err := serviceStatus(ctx, dp, name)
		if err != nil || found {
			return st, found, err
		}
	}
	return datapath.ServiceStatus{}, false, nil
}

// serviceStatus reads one service from a datapath, through ServiceReader when it has it.
func serviceStatus(ctx context.Context, dp datapath.Datapath, name string) (datapath.ServiceStatus, bool, error) {
	if r, ok := dp.(datapath.ServiceReader); ok {
		return r.ServiceStatus(ctx, name)
	}
	all, err := dp.Status(ctx)
	for _, st := range all {
		if st.Name == name {
			return st, true, err
		}
	}
	return datapath.ServiceStatus{}, false, err
}

// Budget checks each half of the plan against its datapath's limits.
func (d *Datapath) Budget(p *plan.Plan) error {
	first, second := d.divide(p)
	var errs []error
	for _, half := range []struct {
		dp datapath.Datapath
		p  *plan.Plan
	}{{d.first, first}, {d.second, second}} {
		if b, ok := half.dp.(datapath.Budgeter); ok && len(half.p.Services) > 0 {
			errs = append(errs, b.Budget(half.p))
		}
	}
	return errors.Join(errs...)
}

var _ datapath.ForwardingChecker = (*Datapath)(nil)

var _ datapath.UnforwardedReader = (*Datapath)(nil)

// Unforwarded reads the counters of the datapaths that count the packets they could not forward.
func (d *Datapath) Unforwarded(ctx context.Context) (map[string]datapath.Unforwarded, error) {
	out := map[string]datapath.Unforwarded{}
	for _, dp := range []datapath.Datapath{d.first, d.second} {
		r, ok := dp.(datapath.UnforwardedReader)
		if !ok {
			continue
		}
		half, err := r.Unforwarded(ctx)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, half)
	}
	return out, nil
}

// CheckForwarding checks the whole plan with the first datapath that checks forwarding: what a
// service needs depends on the plan's datapath and its mode, not on the half that holds it.
func (d *Datapath) CheckForwarding(p *plan.Plan) error {
	for _, dp := range []datapath.Datapath{d.first, d.second} {
		if c, ok := dp.(datapath.ForwardingChecker); ok {
			return c.CheckForwarding(p)
		}
	}
	return nil
}

// Flows lists the service's flows in the datapath that holds it.
func (d *Datapath) Flows(ctx context.Context, service string, filter datapath.FlowFilter) (datapath.FlowList, error) {
	lister, ok := d.holder(service).(datapath.FlowLister)
	if !ok {
		return datapath.FlowList{}, fmt.Errorf("service %s: its datapath cannot list flows", service)
	}
	return lister.Flows(ctx, service, filter)
}

// Conntrack reads the connection table of the first datapath that has one.
func (d *Datapath) Conntrack(ctx context.Context) (count, max uint64, err error) {
	for _, dp := range []datapath.Datapath{d.first, d.second} {
		if r, ok := dp.(datapath.ConntrackReader); ok {
			return r.Conntrack(ctx)
		}
	}
	return 0, 0, errors.New("neither datapath tracks connections")
}

// Watch watches both datapaths.
func (d *Datapath) Watch(ctx context.Context, changed func(what string)) error {
	var errs []error
	for _, dp := range []datapath.Datapath{d.first, d.second} {
		if w, ok := dp.(datapath.Watcher); ok {
			errs = append(errs, w.Watch(ctx, changed))
		}
	}
	return errors.Join(errs...)
}

// Close closes the datapaths that hold resources.
func (d *Datapath) Close() error {
	var errs []error
	for _, dp := range []datapath.Datapath{d.first, d.second} {
		if c, ok := dp.(interface{ Close() error }); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

var _ datapath.FlowReplicator = (*Datapath)(nil)

// errNoReplicator is what the flow replication methods answer when neither datapath replicates
// flows.
var errNoReplicator = errors.New("neither datapath replicates flows")

// replicators are the datapaths that replicate flows.
func (d *Datapath) replicators() []datapath.FlowReplicator {
	var out []datapath.FlowReplicator
	for _, dp := range []datapath.Datapath{d.first, d.second} {
		if r, ok := dp.(datapath.FlowReplicator); ok {
			out = append(out, r)
		}
	}
	return out
}

// WatchFlows watches the flows of the datapaths that replicate them, emitting one batch at a time.
func (d *Datapath) WatchFlows(ctx context.Context, emit func([]datapath.ReplicatedFlow)) error {
	rs := d.replicators()
	if len(rs) == 0 {
		return errNoReplicator
	}
	var mu sync.Mutex
	one := func(batch []datapath.ReplicatedFlow) {
		mu.Lock()
		defer mu.Unlock()
		emit(batch)
	}
	for _, r := range rs {
		if err := r.WatchFlows(ctx, one); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotFlows lists the active flows of the datapaths that replicate them, until fn returns
// false.
func (d *Datapath) SnapshotFlows(ctx context.Context, fn func(datapath.ReplicatedFlow) bool) error {
	rs := d.replicators()
	if len(rs) == 0 {
		return errNoReplicator
	}
	more := true
	for _, r := range rs {
		err := r.SnapshotFlows(ctx, func(f datapath.ReplicatedFlow) bool {
			more = fn(f)
			return more
		})
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// LostFlows sums the flows the datapaths that replicate them could not report.
func (d *Datapath) LostFlows(ctx context.Context) (uint64, error) {
	var total uint64
	for _, r := range d.replicators() {
		n, err := r.LostFlows(ctx)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// ReplicatedUntil tells every datapath that replicates flows.
func (d *Datapath) ReplicatedUntil(ctx context.Context, t time.Time) error {
	var errs []error
	for _, r := range d.replicators() {
		errs = append(errs, r.ReplicatedUntil(ctx, t))
	}
	return errors.Join(errs...)
}

// skipNoService is the reason a datapath gives for a flow of a service it does not hold.
const skipNoService = "no such service"

// ImportFlows hands the flows to the datapaths that replicate flows: each takes those of its own
// services, so a flow counts as of no service only when neither holds its service.
func (d *Datapath) ImportFlows(ctx context.Context, flows []datapath.ReplicatedFlow) (datapath.ImportResult, error) {
	rs := d.replicators()
	if len(rs) == 0 {
		return datapath.ImportResult{}, errNoReplicator
	}
	out := datapath.ImportResult{Skipped: map[string]int{}}
	for _, r := range rs {
		res, err := r.ImportFlows(ctx, flows)
		out.Imported += res.Imported
		for why, n := range res.Skipped {
			if why != skipNoService {
				out.Skipped[why] += n
			}
		}
		if err != nil {
			return out, err
		}
	}
	held := out.Imported
	for _, n := range out.Skipped {
		held += n
	}
	if none := len(flows) - held; none > 0 {
		out.Skipped[skipNoService] = none
	}
	return out, nil
}
