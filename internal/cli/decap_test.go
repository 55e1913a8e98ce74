package cli

import (
	"bytes"
	"testing"

	"github.com/sluicelb/sluice/internal/decap"
)

// TestPrintDecap: the status names the interfaces, the GUE port and every counter.
func TestPrintDecap(t *testing.T) {
	var b bytes.Buffer
	st := decap.Status{Interfaces: []string{"eth0", "eth1"}, GUEPort: 6080, LocalPrefixes: 3, Counts: decap.Counts{IPIP: 1, GUE: 2, Malformed: 3, Foreign: 4}}
	if err := printDecap(&b, st); err != nil {
		t.Fatal(err)
	}
	want := "decap: IPIP and GUE (UDP port 6080) on eth0, eth1; 3 local prefixes\ndecapsulated: 1 IPIP, 2 GUE; dropped: 3 malformed, 4 to another host\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	if err := printDecap(&b, decap.Status{}); err != nil || b.String() != "decap: not attached\n" {
		t.Errorf("got %q (%v)", b.String(), err)
	}
}

// TestDecapPinPathPerNamespace: with --netns, decap pins under the namespace's own path (where
// the lab's routed backends keep theirs), so two namespaces never share one; --pin-path wins.
func TestDecapPinPathPerNamespace(t *testing.T) {
	t.Setenv(enteredEnv, "sluice-b1")
	if got, want := pinned(decap.Options{}).PinPath, "/sys/fs/bpf/sluice-netns/sluice-b1/decap"; got != want {
		t.Errorf("pin path under --netns sluice-b1: %q, want %q", got, want)
	}
	if got := pinned(decap.Options{PinPath: "/sys/fs/bpf/mine"}).PinPath; got != "/sys/fs/bpf/mine" {
		t.Errorf("--pin-path under --netns: %q, want it kept", got)
	}
	t.Setenv(enteredEnv, "")
	if got := pinned(decap.Options{}).PinPath; got != "" {
		t.Errorf("pin path without --netns: %q, want the default (empty)", got)
	}
}
