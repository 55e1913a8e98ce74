package datapath

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// The sysctls that turn the kernel's forwarding of an IP family on, as sysctl -w names them.
// Setting either sets every interface's own (net.ipv4.conf.*.forwarding, net.ipv6.conf.*.forwarding).
const (
	IPv4Forwarding = "net.ipv4.ip_forward"
	IPv6Forwarding = "net.ipv6.conf.all.forwarding"
)

// ForwardingChecker is a Datapath whose services rely on the kernel forwarding their packets:
// with forwarding off the kernel drops them while everything else looks healthy.
type ForwardingChecker interface {
	// CheckForwarding returns a *ForwardingError when a service of p needs a forwarding sysctl
	// that the calling thread's network namespace has off.
	CheckForwarding(p *plan.Plan) error
}

// ForwardingError is a plan whose services need forwarding that the balancer's network
// namespace has off.
type ForwardingError struct {
	// Off are the sysctls that are off, each with a service that needs it.
	Off []ForwardingNeed
}

// ForwardingNeed is a forwarding sysctl and a service that needs it on.
type ForwardingNeed struct {
	Sysctl  string
	Service string
	Mode    config.Mode
}

func (e *ForwardingError) Error() string {
	parts := make([]string, 0, len(e.Off))
	for _, n := range e.Off {
		parts = append(parts, fmt.Sprintf("%s=0 in the balancer's network namespace, and service %s (%s) needs it on: the kernel drops every packet the balancer should forward to a backend (sysctl -w %s=1)",
			n.Sysctl, n.Service, n.Mode, n.Sysctl))
	}
	return strings.Join(parts, "; ")
}

// ForwardingSysctl is the sysctl that turns on the forwarding of addr's IP family.
func ForwardingSysctl(addr netip.Addr) string {
	if addr.Is4() {
		return IPv4Forwarding
	}
	return IPv6Forwarding
}

// NeedsForwarding tells whether a service of datapath dp relies on the kernel forwarding its IP
// family: nft nat and fullnat are forwarded by the stack after their nat hooks; every ebpf mode
// routes with bpf_fib_lookup, which refuses (BPF_FIB_LKUP_RET_FWD_DISABLED) where the receiving
// interface does not forward. Only nft dsr does without: its netdev fwd hands the frame to the
// neighbour layer directly.
func NeedsForwarding(dp config.Datapath, s *plan.Service) bool {
	return dp == config.DatapathEBPF || !s.Mode.Direct()
}

// CheckForwarding returns a *ForwardingError when a service of p needs a forwarding sysctl that the
// calling thread's network namespace has off (see NeedsForwarding), naming the first service of
// each family that needs it.
func CheckForwarding(p *plan.Plan) error {
	var off []ForwardingNeed
	checked := map[string]bool{}
	for i := range p.Services {
		s := &p.Services[i]
		if !NeedsForwarding(p.Datapath, s) {
			continue
		}
		name := ForwardingSysctl(s.VIP)
		if checked[name] {
			continue
		}
		checked[name] = true
		on, err := sysctlOn(name)
		if err != nil {
			return err
		}
		if !on {
			off = append(off, ForwardingNeed{Sysctl: name, Service: s.Name, Mode: s.Mode})
		}
	}
	if len(off) > 0 {
		return &ForwardingError{Off: off}
	}
	return nil
}

// sysctlOn tells whether the sysctl name (dotted, like net.ipv4.ip_forward) of the calling
// thread's network namespace is not 0.
func sysctlOn(name string) (bool, error) {
	proc, err := procfs.NewDefaultFS()
	if err != nil {
		return false, err
	}
	v, err := readSysctl(proc, name)
	return v != 0, err
}
