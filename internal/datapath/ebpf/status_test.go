package ebpf

import (
	"context"
	"reflect"
	"testing"
)

// TestServiceStatusIsOneOfStatus: reading one service gives what Status lists for it, before and
// after the Datapath forgets its state; an unknown service is not found.
func TestServiceStatusIsOneOfStatus(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, manyServices(5, 1)))
	for _, resync := range []bool{false, true} {
		if resync {
			d.Resync()
		}
		all, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range all {
			got, found, err := d.ServiceStatus(context.Background(), want.Name)
			if err != nil || !found || !reflect.DeepEqual(got, want) {
				t.Errorf("resync %v: ServiceStatus(%s) = %+v, %v, %v; want %+v", resync, want.Name, got, found, err, want)
			}
		}
	}
	if _, found, err := d.ServiceStatus(context.Background(), "nope"); found || err != nil {
		t.Errorf("an unknown service: found %v, %v", found, err)
	}
}
