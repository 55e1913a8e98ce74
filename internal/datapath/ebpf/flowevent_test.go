package ebpf

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestDecodeFlowEventIsBinaryDecode: the copy reads every field of a flow_events sample as
// binary.Decode does, and refuses a short sample.
func TestDecodeFlowEventIsBinaryDecode(t *testing.T) {
	size := binary.Size(flowEvent{})
	r := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		sample := make([]byte, size)
		for i := range sample {
			sample[i] = byte(r.Uint32())
		}
		var copied, decoded flowEvent
		if !decodeFlowEvent(sample, &copied) {
			t.Fatal("a whole sample was refused")
		}
		if _, err := binary.Decode(sample, binary.NativeEndian, &decoded); err != nil {
			t.Fatal(err)
		}
		a, _ := binary.Append(nil, binary.NativeEndian, copied)
		b, _ := binary.Append(nil, binary.NativeEndian, decoded)
		if !bytes.Equal(a, b) {
			t.Fatalf("copied %+v, binary.Decode read %+v", copied, decoded)
		}
	}
	var ev flowEvent
	if decodeFlowEvent(make([]byte, size-1), &ev) {
		t.Error("a short sample was read")
	}
}
