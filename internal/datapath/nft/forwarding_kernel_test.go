package nft

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/datapath"
)

// TestKernelApplyRefusesNATWithoutForwarding: with IPv4 forwarding off, Apply refuses a nat plan
// naming net.ipv4.ip_forward and its fix, and programs nothing; a dsr plan, whose fwd needs no
// forwarding, is applied; with forwarding on, the nat plan is too.
func TestKernelApplyRefusesNATWithoutForwarding(t *testing.T) {
	inFreshNetns(t, func() {
		forward(t, "0")
		d := newTestDatapath(t)
		nat := twoBackendPlan("nat", 0, service("web", "tcp", "10.91.9.100", 80, 80))
		err := d.Apply(context.Background(), nat)
		var fe *datapath.ForwardingError
		if !errors.As(err, &fe) || fe.Off[0].Sysctl != datapath.IPv4Forwarding || !strings.Contains(err.Error(), "sysctl -w net.ipv4.ip_forward=1") {
			t.Fatalf("Apply of nat without forwarding = %v, want a ForwardingError naming net.ipv4.ip_forward", err)
		}
		if out, err := exec.Command("nft", "list", "table", "inet", TableName).CombinedOutput(); err == nil {
			t.Fatalf("the refused Apply programmed a table:\n%s", out)
		}
		dsr := twoBackendPlan("dsr", 0, service("web", "tcp", "10.91.9.100", 80, 80))
		apply(t, d, dsr)
		forward(t, "1")
		apply(t, d, nat)
	})
}
