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

// Equal reports whether two services program the same, slots included.
func (s *Service) Equal(o *Service) bool {
	if !sameSlots(s.Slots, o.Slots) {
		return false
	}
	a, b := *s, *o
	a.Slots, b.Slots = nil, nil
	return reflect.DeepEqual(a, b)
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
