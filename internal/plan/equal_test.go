package plan

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestEqual(t *testing.T) {
	base := func() *Plan {
		return &Plan{Datapath: "nft", Services: []Service{{
			Name: "web", VIP: netip.MustParseAddr("10.0.0.1"), Mode: "nat",
			Backends: []Backend{{Addr: netip.MustParseAddr("10.0.1.1"), Weight: 1}},
			Slots:    []int{0, 0, 0},
		}}}
	}
	a := base()
	for _, tt := range []struct {
		name   string
		change func(p *Plan)
		equal  bool
	}{
		{"identical copy", func(*Plan) {}, true},
		{"shared slots", func(p *Plan) { p.Services[0].Slots = a.Services[0].Slots }, true},
		{"a slot", func(p *Plan) { p.Services[0].Slots[2] = 1 }, false},
		{"slot count", func(p *Plan) { p.Services[0].Slots = p.Services[0].Slots[:2] }, false},
		{"a weight", func(p *Plan) { p.Services[0].Backends[0].Weight = 2 }, false},
		{"the mode", func(p *Plan) { p.Services[0].Mode = "dsr" }, false},
		{"the datapath", func(p *Plan) { p.Datapath = "ebpf" }, false},
		{"interfaces", func(p *Plan) { p.Interfaces = []string{"eth0"} }, false},
		{"a service more", func(p *Plan) { p.Services = append(p.Services, Service{Name: "x"}) }, false},
	} {
		b := base()
		tt.change(b)
		if got := a.Equal(b); got != tt.equal {
			t.Errorf("%s: Equal = %v, want %v", tt.name, got, tt.equal)
		}
	}
	var none *Plan
	if !none.Equal(nil) || none.Equal(a) || a.Equal(nil) {
		t.Error("nil plans")
	}
}

// TestServiceEqualEveryField: Service.Equal tells two services apart by any one field, and a nil
// list from an empty one, as reflect.DeepEqual does; a field added to Service without a
// comparison fails here.
func TestServiceEqualEveryField(t *testing.T) {
	typ := reflect.TypeFor[Service]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		var a, b Service
		set := reflect.ValueOf(&b).Elem().Field(i)
		setNonZero(t, set)
		if a.Equal(&b) || b.Equal(&a) {
			t.Errorf("%s: services that differ only there are Equal", f.Name)
		}
		if f.Type.Kind() == reflect.Slice && f.Name != "Slots" {
			var c Service
			reflect.ValueOf(&c).Elem().Field(i).Set(reflect.MakeSlice(f.Type, 0, 0))
			if a.Equal(&c) != reflect.DeepEqual(a, c) {
				t.Errorf("%s: nil and empty: Equal %v, DeepEqual %v", f.Name, a.Equal(&c), reflect.DeepEqual(a, c))
			}
		}
		if c := b; !b.Equal(&c) {
			t.Errorf("%s: a copy is not Equal", f.Name)
		}
	}
}

// setNonZero gives v a value other than its zero value.
func setNonZero(t *testing.T, v reflect.Value) {
	t.Helper()
	switch {
	case v.Type() == reflect.TypeFor[netip.Addr]():
		v.Set(reflect.ValueOf(netip.MustParseAddr("10.0.0.1")))
	case v.Type() == reflect.TypeFor[netip.Prefix]():
		v.Set(reflect.ValueOf(netip.MustParsePrefix("10.0.0.0/8")))
	case v.Kind() == reflect.Slice:
		elem := reflect.New(v.Type().Elem()).Elem()
		setNonZero(t, elem)
		v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), elem))
	case v.Kind() == reflect.Struct:
		setNonZero(t, v.Field(0))
	case v.Kind() == reflect.String:
		v.SetString("x")
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.CanInt():
		v.SetInt(1)
	case v.CanUint():
		v.SetUint(1)
	default:
		t.Fatalf("no value for %s", v.Type())
	}
}
