package plan

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
)

// Change is the difference between two plans as an operator wants to see it.
type Change struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
	// Moved is, per changed service, the share of slots (and so of new flows' hash space) whose
	// backend differs.
	Moved map[string]float64 `json:"moved"`
	// Services tells what differs in each service added, removed or changed, by name.
	Services []ServiceChange `json:"services"`
	// BGP tells what differs in what the node tells the routers (NoteBGP).
	BGP []BGPChange `json:"bgp,omitempty"`
}

// The ops of a ServiceChange and of a BackendChange.
const (
	OpAdd    = "add"
	OpRemove = "remove"
	OpChange = "change"
)

// ServiceChange is what differs in one service.
type ServiceChange struct {
	Name string `json:"name"`
	Op   string `json:"op"` // OpAdd, OpRemove or OpChange
	// Listener is the service's "tcp 10.0.0.1:80", as the new plan has it (the old one's when removed).
	Listener string        `json:"listener"`
	Fields   []FieldChange `json:"fields,omitempty"`
	// Backends added, removed or re-weighted (every backend of a service added or removed).
	Backends []BackendChange `json:"backends,omitempty"`
	// Moved is the share of new flows sent to another backend than before (changed services).
	Moved float64 `json:"moved,omitempty"`
}

// FieldChange is a setting of a service that differs: listener, mode, scheduler, fallback,
// flow_timeout or health_check.
type FieldChange struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// BackendChange is a backend added, removed or re-weighted (OpChange); weights as programmed,
// after health.
type BackendChange struct {
	Backend string `json:"backend"`
	Op      string `json:"op"`
	From    int    `json:"from_weight"`
	To      int    `json:"to_weight"`
}

// Empty tells whether nothing differs.
func (c Change) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed)+len(c.BGP) == 0 }

// Diff compares two plans; old may be nil.
func Diff(old, new *Plan) Change {
	c := Change{Moved: map[string]float64{}}
	before := map[string]*Service{}
	if old != nil {
		for i := range old.Services {
			before[old.Services[i].Name] = &old.Services[i]
		}
	}
	for i := range new.Services {
		n := &new.Services[i]
		o, ok := before[n.Name]
		delete(before, n.Name)
		switch {
		case !ok:
			c.Added = append(c.Added, n.Name)
			c.Services = append(c.Services, ServiceChange{Name: n.Name, Op: OpAdd, Listener: n.Listener(), Backends: diffBackends(nil, n.Backends)})
		case !o.Equal(n):
			c.Changed = append(c.Changed, n.Name)
			c.Moved[n.Name] = moved(o, n)
			c.Services = append(c.Services, ServiceChange{Name: n.Name, Op: OpChange, Listener: n.Listener(),
				Fields: append(diffFields(o, n), diffThresholds(o.Backends, n.Backends)...), Backends: diffBackends(o.Backends, n.Backends), Moved: c.Moved[n.Name]})
		}
	}
	if old != nil {
		for _, o := range old.Services {
			if _, gone := before[o.Name]; gone {
				c.Removed = append(c.Removed, o.Name)
				c.Services = append(c.Services, ServiceChange{Name: o.Name, Op: OpRemove, Listener: o.Listener(), Backends: diffBackends(o.Backends, nil)})
			}
		}
	}
	return c
}

// NoteHealthChecks adds to c the services of p whose health check differs between the configs
// p was built from (new) and before it (old), which plans do not hold.
func (c *Change) NoteHealthChecks(old, new *config.Config, p *Plan) {
	checks := map[string]*config.HealthCheck{}
	for _, s := range old.Services {
		checks[s.Name] = s.HealthCheck
	}
	for _, s := range new.Services {
		was, ok := checks[s.Name]
		if !ok || reflect.DeepEqual(was, s.HealthCheck) {
			continue
		}
		field := FieldChange{Field: "health_check", From: describeCheck(was), To: describeCheck(s.HealthCheck)}
		if i := slices.IndexFunc(c.Services, func(x ServiceChange) bool { return x.Name == s.Name }); i >= 0 {
			c.Services[i].Fields = append(c.Services[i].Fields, field)
			continue
		}
		listener := ""
		if i := slices.IndexFunc(p.Services, func(x Service) bool { return x.Name == s.Name }); i >= 0 {
			listener = p.Services[i].Listener()
		}
		c.Changed = append(c.Changed, s.Name)
		c.Moved[s.Name] = 0
		c.Services = append(c.Services, ServiceChange{Name: s.Name, Op: OpChange, Listener: listener, Fields: []FieldChange{field}})
	}
}

// describeCheck renders a health check as its JSON, "none" when there is none.
func describeCheck(h *config.HealthCheck) string {
	if h == nil {
		return "none"
	}
	data, err := json.Marshal(h)
	if err != nil {
		return string(h.Type)
	}
	return string(data)
}

// diffFields lists the settings of a service that differ, besides its backends.
func diffFields(o, n *Service) []FieldChange {
	var out []FieldChange
	for _, f := range []struct{ field, from, to string }{
		{"listener", o.Listener(), n.Listener()},
		{"mode", string(o.Mode), string(n.Mode)},
		{"fullnat_source", addrText(o.FullNATSource), addrText(n.FullNATSource)},
		{"tunnel", o.Tunnel.String(), n.Tunnel.String()},
		{"scheduler", string(o.Scheduler), string(n.Scheduler)},
		{"fallback", string(o.Fallback), string(n.Fallback)},
		{"flow_timeout", o.FlowTimeout.String(), n.FlowTimeout.String()},
		{"sh_port", strconv.FormatBool(o.SHPort), strconv.FormatBool(n.SHPort)},
		{"persistence", persistence(o), persistence(n)},
		{"quorum", quorumState(o), quorumState(n)},
		{"syn_protection", strconv.FormatBool(o.SYNProtection), strconv.FormatBool(n.SYNProtection)},
		{"limits", limitsText(o), limitsText(n)},
		{"source_allow", prefixesText(o.SourceAllow), prefixesText(n.SourceAllow)},
		{"source_deny", prefixesText(o.SourceDeny), prefixesText(n.SourceDeny)},
	} {
		if f.from != f.to {
			out = append(out, FieldChange{Field: f.field, From: f.from, To: f.to})
		}
	}
	return out
}

// diffThresholds lists the connection thresholds that changed on backends in both lists.
func diffThresholds(old, new []Backend) []FieldChange {
	was := map[string]Backend{}
	for _, b := range old {
		was[b.ID()] = b
	}
	var out []FieldChange
	for _, b := range new {
		if o, ok := was[b.ID()]; ok && (o.MaxConns != b.MaxConns || o.MinConns != b.MinConns) {
			out = append(out, FieldChange{Field: "backend " + b.ID() + " connections", From: thresholds(o), To: thresholds(b)})
		}
	}
	return out
}

// thresholds renders a backend's connection thresholds: "unlimited" or "max 100 min 75".
func thresholds(b Backend) string {
	if b.MaxConns == 0 {
		return "unlimited"
	}
	return "max " + strconv.Itoa(b.MaxConns) + " min " + strconv.Itoa(b.MinConns)
}

// persistence renders a service's persistence: "off" or "300s /24".
func persistence(s *Service) string {
	if s.Persistence == 0 {
		return "off"
	}
	return s.Persistence.String() + " /" + strconv.Itoa(s.PersistencePrefix)
}

// limitsText renders a service's limits, leaving out those it does not set, and their action:
// "100 new connections/s, 5 connections per source; over them: drop", "none" without any.
func limitsText(s *Service) string {
	l := s.Limits
	var set []string
	for _, limit := range []struct {
		n    int
		unit string
	}{
		{l.NewConnectionsPerSecond, "new connections/s"},
		{l.NewConnectionsPerSourcePerSecond, "new connections/s per source"},
		{l.Connections, "connections"},
		{l.ConnectionsPerSource, "connections per source"},
	} {
		if limit.n > 0 {
			set = append(set, strconv.Itoa(limit.n)+" "+limit.unit)
		}
	}
	if len(set) == 0 {
		return "none"
	}
	text := strings.Join(set, ", ")
	if s.LimitAction != "" {
		text += "; over them: " + string(s.LimitAction)
	}
	return text
}

// prefixesText renders a source list: "none", the prefixes when a few, or their count.
func prefixesText(list []netip.Prefix) string {
	switch {
	case len(list) == 0:
		return "none"
	case len(list) <= 4:
		out := make([]string, len(list))
		for i, p := range list {
			out[i] = p.String()
		}
		return strings.Join(out, " ")
	default:
		h := fnv.New32a()
		for _, p := range list {
			h.Write([]byte(p.String() + " "))
		}
		return fmt.Sprintf("%d prefixes (%s ..., digest %08x)", len(list), list[0], h.Sum32())
	}
}

// quorumState renders whether a service lost its quorum.
func quorumState(s *Service) string {
	if s.QuorumLost {
		return "lost"
	}
	return "held"
}

// diffBackends lists the backends added, removed or re-weighted, in the order of their IDs.
func diffBackends(old, new []Backend) []BackendChange {
	was := map[string]int{}
	for _, b := range old {
		was[b.ID()] = b.Weight
	}
	var out []BackendChange
	for _, b := range new {
		w, ok := was[b.ID()]
		delete(was, b.ID())
		switch {
		case !ok:
			out = append(out, BackendChange{Backend: b.ID(), Op: OpAdd, To: b.Weight})
		case w != b.Weight:
			out = append(out, BackendChange{Backend: b.ID(), Op: OpChange, From: w, To: b.Weight})
		}
	}
	for _, b := range old {
		if w, gone := was[b.ID()]; gone {
			out = append(out, BackendChange{Backend: b.ID(), Op: OpRemove, From: w})
		}
	}
	return out
}

// moved is the share of new flows that the new table sends to another backend than the old one
// did: slot by slot for tables of one size; for tables of different sizes, over hashes spread
// evenly over the 32-bit space (a flow's slot is its hash modulo the table's size).
func moved(o, n *Service) float64 {
	if len(n.Slots) == 0 || len(o.Slots) == 0 {
		return 1
	}
	differs := func(i, j int) bool { return o.Backends[o.Slots[i]].ID() != n.Backends[n.Slots[j]].ID() }
	diff, total := 0, len(n.Slots)
	if len(o.Slots) == len(n.Slots) {
		for i := range n.Slots {
			if differs(i, i) {
				diff++
			}
		}
	} else {
		const samples = 1 << 16
		for i := range uint64(samples) {
			h := i<<16 | 1<<15
			if differs(int(h%uint64(len(o.Slots))), int(h%uint64(len(n.Slots)))) {
				diff++
			}
		}
		total = samples
	}
	return float64(diff) / float64(total)
}

// addrText renders an address, "none" when it is not set.
func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}
