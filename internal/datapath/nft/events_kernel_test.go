package nft

import (
	"bufio"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

// TestKernelReplicatedConnectionRaisesTwoEvents opens and closes one TCP connection through a nat
// service and counts the conntrack events a listener (conntrackd, here conntrack -E) reads of it:
// when the node replicates its flows, the one that makes it established (with its state) and its
// end; otherwise every state change.
func TestKernelReplicatedConnectionRaisesTwoEvents(t *testing.T) {
	if _, err := exec.LookPath("conntrack"); err != nil {
		testutil.Missing(t, "needs conntrack (conntrack-tools): %v", err)
	}
	inFreshNetns(t, func() {
		client, d := sessionRig(t)
		for i, replicated := range []bool{false, true} {
			p := sessionPlan(t, "", "port: 80\nmode: nat", rigBackends(netip.Addr{})...)
			p.Services[0].Replicated = replicated
			apply(t, d, p)
			src := netip.AddrPortFrom(netip.MustParseAddr("10.91.1.2"), uint16(41000+i))
			events := conntrackEvents(t, func() {
				backendFor(t, client, src, netip.MustParseAddrPort("10.91.9.100:80"))
			}, fmt.Sprintf("sport=%d ", src.Port()))
			t.Logf("replicated %v: %d events\n%s", replicated, len(events), strings.Join(events, "\n"))
			switch {
			case replicated && (len(events) != 2 || !strings.Contains(events[0], "ESTABLISHED") || !strings.Contains(events[1], "[DESTROY]")):
				t.Errorf("a replicated connection raised %d events, want its ESTABLISHED update and its DESTROY", len(events))
			case !replicated && len(events) < 4:
				t.Errorf("a connection that is not replicated raised %d events: the listener should see every state", len(events))
			}
		}
	})
}

// conntrackEvents runs conntrack -E while connect runs, then deletes the connection's entry and
// returns the events of the lines holding match, up to and including its DESTROY.
func conntrackEvents(t *testing.T, connect func(), match string) []string {
	t.Helper()
	cmd := exec.Command("conntrack", "-E", "-p", "tcp")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		scanner := bufio.NewScanner(out)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
	}()
	// The listener is subscribed once it reports an entry made after it started.
	marker := "sport=1 "
	testutil.Eventually(t, "conntrack -E listening", func() bool {
		_ = exec.Command("conntrack", "-I", "-p", "tcp", "-s", "192.0.2.1", "-d", "192.0.2.2", "--sport", "1", "--dport", "2",
			"--state", "ESTABLISHED", "-t", "10", "-u", "SEEN_REPLY").Run()
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, marker) {
					return true
				}
			case <-time.After(200 * time.Millisecond):
				return false
			}
		}
	})
	connect()
	if b, err := exec.Command("conntrack", "-D", "-p", "tcp", "--orig-port-src", strings.TrimSuffix(strings.TrimPrefix(match, "sport="), " ")).CombinedOutput(); err != nil {
		t.Fatalf("conntrack -D: %v: %s", err, b)
	}
	var events []string
	for l := range lines {
		if !strings.Contains(l, match) {
			continue
		}
		events = append(events, strings.TrimSpace(l))
		if strings.Contains(l, "[DESTROY]") {
			break
		}
	}
	return events
}
