package ebpf

import "testing"

func TestRingSpaceIsFirstFit(t *testing.T) {
	r := newRingSpace(100)
	alloc := func(n, want uint32) {
		t.Helper()
		if at, err := r.alloc(n); err != nil || at != want {
			t.Fatalf("alloc(%d) = %d, %v; want %d", n, at, err, want)
		}
	}
	alloc(10, 0)
	alloc(20, 10)
	alloc(30, 30)
	r.free(10)
	alloc(25, 60) // the hole of 20 is too small
	alloc(15, 10) // it fits here
	alloc(5, 25)
	alloc(15, 85)
	if at, err := r.alloc(1); err == nil {
		t.Fatalf("alloc beyond the end = %d", at)
	}
	if r.used() != 100 || r.end() != 100 {
		t.Errorf("used %d, end %d; want 100, 100", r.used(), r.end())
	}
}

func TestRingSpaceReserveRefusesOverlaps(t *testing.T) {
	r := newRingSpace(100)
	if err := r.reserve(40, 10); err != nil {
		t.Fatal(err)
	}
	for _, s := range []span{{35, 6}, {49, 2}, {42, 1}, {95, 6}, {0xffffffff, 2}} {
		if err := r.reserve(s.offset, s.size); err == nil {
			t.Errorf("reserve(%d, %d) overlaps or overflows but succeeded", s.offset, s.size)
		}
	}
	if err := r.reserve(50, 50); err != nil {
		t.Error(err)
	}
	if at, err := r.alloc(40); err != nil || at != 0 {
		t.Errorf("alloc(40) = %d, %v; want 0", at, err)
	}
}
