package datapath

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/plan"
)

// setForwarding sets the calling thread's namespace's forwarding sysctl name to v.
func setForwarding(t *testing.T, name, v string) {
	t.Helper()
	if err := os.WriteFile(procSys+strings.ReplaceAll(name, ".", "/"), []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckForwardingNamesTheSysctlAServiceNeeds: a new namespace forwards nothing, so every
// service that relies on forwarding is refused naming its family's sysctl and the fix; nft dsr,
// which does not, passes; once the sysctl is on, the plan passes.
func TestCheckForwardingNamesTheSysctlAServiceNeeds(t *testing.T) {
	svc := func(name, vip string, mode config.Mode) plan.Service {
		return plan.Service{Name: name, VIP: netip.MustParseAddr(vip), Mode: mode}
	}
	netnstest.Run(t, func() {
		cases := []struct {
			what string
			p    plan.Plan
			want []string // the sysctls named, in order; none: passes
		}{
			{"nft nat", plan.Plan{Datapath: config.DatapathNFT, Services: []plan.Service{svc("web", "10.0.0.1", config.ModeNAT)}}, []string{IPv4Forwarding}},
			{"nft fullnat v6", plan.Plan{Datapath: config.DatapathNFT, Services: []plan.Service{svc("web6", "fd00::1", config.ModeFullNAT)}}, []string{IPv6Forwarding}},
			{"nft dsr", plan.Plan{Datapath: config.DatapathNFT, Services: []plan.Service{svc("web", "10.0.0.1", config.ModeDSR)}}, nil},
			{"ebpf dsr", plan.Plan{Datapath: config.DatapathEBPF, Services: []plan.Service{svc("web", "10.0.0.1", config.ModeDSR)}}, []string{IPv4Forwarding}},
			{"ebpf both", plan.Plan{Datapath: config.DatapathEBPF, Services: []plan.Service{
				svc("web", "10.0.0.1", config.ModeDSR), svc("web6", "fd00::1", config.ModeNAT), svc("dns", "10.0.0.2", config.ModeNAT)}},
				[]string{IPv4Forwarding, IPv6Forwarding}},
			{"no services", plan.Plan{Datapath: config.DatapathEBPF}, nil},
		}
		for _, c := range cases {
			err := CheckForwarding(&c.p)
			var fe *ForwardingError
			if c.want == nil {
				if err != nil {
					t.Errorf("%s: %v, want nil", c.what, err)
				}
				continue
			}
			if !errors.As(err, &fe) || len(fe.Off) != len(c.want) {
				t.Errorf("%s: %v, want a ForwardingError naming %v", c.what, err, c.want)
				continue
			}
			for i, name := range c.want {
				if fe.Off[i].Sysctl != name || !strings.Contains(err.Error(), "sysctl -w "+name+"=1") {
					t.Errorf("%s: %v, want %s and its fix", c.what, err, name)
				}
			}
		}
		setForwarding(t, IPv4Forwarding, "1")
		setForwarding(t, IPv6Forwarding, "1")
		for _, c := range cases {
			if err := CheckForwarding(&c.p); err != nil {
				t.Errorf("%s with forwarding on: %v", c.what, err)
			}
		}
	})
}
