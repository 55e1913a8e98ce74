package ebpf

import "testing"

func TestIDSetHandsOutTheLowestFreeID(t *testing.T) {
	s := newIDSet(130)
	for want := range uint32(130) {
		if id, ok := s.alloc(); !ok || id != want {
			t.Fatalf("alloc = %d, %v; want %d", id, ok, want)
		}
	}
	if id, ok := s.alloc(); ok {
		t.Fatalf("alloc beyond the limit = %d", id)
	}
	s.free(70)
	s.free(3)
	for _, want := range []uint32{3, 70} {
		if id, ok := s.alloc(); !ok || id != want {
			t.Errorf("alloc = %d, %v; want the freed %d", id, ok, want)
		}
	}
	if !s.has(3) || s.has(130) {
		t.Error("has is wrong")
	}
}

func TestIDSetMarksFoundIDs(t *testing.T) {
	s := newIDSet(10)
	if !s.mark(0) || !s.mark(2) || s.mark(10) {
		t.Fatal("mark accepts ids below the limit only")
	}
	for _, want := range []uint32{1, 3} {
		if id, _ := s.alloc(); id != want {
			t.Errorf("alloc = %d, want %d", id, want)
		}
	}
}
