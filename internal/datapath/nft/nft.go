// Package nft is Sluice's nftables datapath: an inet table for nat and fullnat (DNAT through
// conntrack, so established flows keep their backend) and a netdev table for dsr, both laid out
// like nftlb's (a verdict map keyed by proto . vip . port, one chain per service) and changed by
// one atomic transaction holding only the difference.
package nft

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Datapath programs plans through nft in the current network namespace.
type Datapath struct {
	nft    knftables.Interface                      // transactions spanning both tables
	tables map[knftables.Family]knftables.Interface // listings, one per table
	log    *slog.Logger
}

var _ datapath.Datapath = (*Datapath)(nil)

// New checks that nft works here and returns the datapath.
func New(log *slog.Logger) (*Datapath, error) {
	nft, err := knftables.New("", "")
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	d := &Datapath{nft: nft, tables: map[knftables.Family]knftables.Interface{}, log: log}
	for _, f := range families {
		if d.tables[f], err = knftables.New(f, TableName); err != nil {
			return nil, fmt.Errorf("nftables: %w", err)
		}
	}
	return d, nil
}

// Apply programs the plan, changing only what differs from the kernel's current state.
func (d *Datapath) Apply(ctx context.Context, p *plan.Plan) error {
	env, err := hostEnvironment(p.Interfaces)
	if err != nil {
		return err
	}
	want, err := render(p, env)
	if err != nil {
		return err
	}
	have, err := d.read(ctx)
	if err != nil {
		return err
	}
	tx := d.nft.NewTransaction()
	n := reconcile(tx, have, want)
	if n == 0 {
		d.log.Debug("nft: kernel already matches the plan")
		return nil
	}
	d.log.Info("nft: applying", "operations", n)
	if err := d.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nft transaction (%d operations) rejected, nothing changed: %w", n, err)
	}
	return nil
}

// Flush deletes Sluice's tables.
func (d *Datapath) Flush(ctx context.Context) error {
	have, err := d.read(ctx)
	if err != nil {
		return err
	}
	tx := d.nft.NewTransaction()
	if reconcile(tx, have, newState()) == 0 {
		return nil
	}
	return d.nft.Run(ctx, tx)
}

// Status reads the programmed services back from the kernel, with per-backend counters.
func (d *Datapath) Status(ctx context.Context) ([]datapath.ServiceStatus, error) {
	st, err := d.read(ctx)
	if err != nil {
		return nil, err
	}
	var out []datapath.ServiceStatus
	for _, k := range sortedKeys(st.sets) {
		if !strings.HasPrefix(k.name, "dispatch") {
			continue
		}
		for _, id := range sortedIDs(st.sets[k].elems) {
			e := st.sets[k].elems[id]
			if s, ok := serviceStatus(st, k.family, e); ok {
				out = append(out, s)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// serviceStatus rebuilds one service from its dispatch element, members map, slots and counters.
func serviceStatus(st *state, f knftables.Family, dispatch *knftables.Element) (datapath.ServiceStatus, bool) {
	if dispatch.Comment == nil || len(dispatch.Value) != 1 {
		return datapath.ServiceStatus{}, false
	}
	desc := strings.Fields(*dispatch.Comment)
	chain, ok := strings.CutPrefix(dispatch.Value[0], "goto svc-")
	if len(desc) != 6 || !ok {
		return datapath.ServiceStatus{}, false
	}
	s := datapath.ServiceStatus{Name: desc[0], Protocol: desc[1], VIP: desc[2], Ports: desc[3], Mode: desc[4], Scheduler: desc[5]}
	// Share of the slot table per backend chain (dsr slots hold marks, resolved via the marks map).
	marks := map[string]string{}
	if m := st.sets[objKey{f, "backends-" + chain}]; m != nil {
		for _, e := range m.elems {
			marks[strings.Join(e.Key, "")] = strings.Join(e.Value, "")
		}
	}
	owners := map[string]int{}
	if slots := st.sets[objKey{f, "slots-" + chain}]; slots != nil {
		for _, e := range slots.elems {
			target := strings.Join(e.Value, "")
			if t, ok := marks[target]; ok {
				target = t[:strings.LastIndex(t, "-")] // drop the device part of a dsr chain
			}
			owners[strings.TrimPrefix(target, "goto ")]++
			s.Slots++
		}
	}
	if members := st.sets[objKey{f, "members-" + chain}]; members != nil {
		for _, id := range sortedIDs(members.elems) {
			e := members.elems[id]
			if len(e.Key) != 2 || len(e.Value) != 1 {
				continue
			}
			port, _ := strconv.Atoi(e.Key[1])
			weight, _ := strconv.Atoi(e.Value[0])
			b := datapath.BackendStatus{Address: e.Key[0], Port: port, Weight: weight}
			bid := backendID(e.Key[0], port)
			if c := st.counters[objKey{f, "c-" + s.Name + "-" + hash8(bid)}]; c != nil {
				b.Packets, b.Bytes = deref(c.Packets), deref(c.Bytes)
			}
			if s.Slots > 0 {
				b.Share = float64(owners[backendChain(s.Name, s.Protocol, bid, "")]) / float64(s.Slots)
			}
			s.Backends = append(s.Backends, b)
		}
	}
	return s, true
}

// backendID is plan.Backend.ID for an address and port as listed by nft.
func backendID(addr string, port int) string {
	if port == 0 {
		return addr
	}
	if strings.Contains(addr, ":") {
		addr = "[" + addr + "]"
	}
	return addr + ":" + strconv.Itoa(port)
}

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}

// ResetFlows drops the established flows of one backend of a service.
func (d *Datapath) ResetFlows(ctx context.Context, s *plan.Service, b plan.Backend) (int, error) {
	return 0, fmt.Errorf("nft: resetting flows of %s is not implemented yet", b.ID())
}
