package plan

import (
	"reflect"
	"slices"
)

// Equal reports whether two plans program the same. Plans of one Builder share the slot table of
// an unchanged service, so comparing them costs nothing per slot.
func (p *Plan) Equal(o *Plan) bool {
	if p == nil || o == nil {
		return p == o
	}
	a, b := *p, *o
	a.Services, b.Services = nil, nil
	return reflect.DeepEqual(a, b) && slices.EqualFunc(p.Services, o.Services, func(x, y Service) bool { return x.Equal(&y) })
}

// Equal reports whether two services program the same, slots included. It compares as
// reflect.DeepEqual does (a nil list is not an empty one), field by field: a plan diff compares
// 10,000 services, and reflection was most of its time.
func (s *Service) Equal(o *Service) bool {
	return sameSlots(s.Slots, o.Slots) && s.sameSettings(o) && sameList(s.Ports, o.Ports) &&
		sameList(s.SourceAllow, o.SourceAllow) && sameList(s.SourceDeny, o.SourceDeny) &&
		sameList(s.Backends, o.Backends)
}

// sameSettings compares every field of two services but the lists.
func (s *Service) sameSettings(o *Service) bool {
	return s.Name == o.Name && s.VIP == o.VIP && s.Protocol == o.Protocol && s.Mode == o.Mode &&
		s.Scheduler == o.Scheduler && s.Fallback == o.Fallback && s.FlowTimeout == o.FlowTimeout &&
		s.SHPort == o.SHPort && s.Persistence == o.Persistence && s.PersistencePrefix == o.PersistencePrefix &&
		s.QuorumLost == o.QuorumLost && s.FullNATSource == o.FullNATSource && s.Tunnel == o.Tunnel &&
		s.SYNProtection == o.SYNProtection && s.Limits == o.Limits && s.LimitAction == o.LimitAction &&
		s.Uncounted == o.Uncounted && s.KernelTimeouts == o.KernelTimeouts && s.Replicated == o.Replicated
}

// sameList compares lists as reflect.DeepEqual does: both nil, or both not nil and equal.
func sameList[E comparable](a, b []E) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

// sameSlots compares slot tables, at once when both are the same shared table.
func sameSlots(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}
