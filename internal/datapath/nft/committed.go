package nft

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/plan"
)

// RenderVersion names how this package renders a plan into nftables objects: two sluice
// binaries of the same RenderVersion write the same tables for the same plan, so that one may
// start from the last apply of the other (an upgrade) instead of reading every table back.
// TestRenderVersionFollowsTheGoldens fails when the golden renderings change while it stays.
const RenderVersion = 1

// Committed is what the datapath's last Apply left in the kernel, for a one-shot command to keep
// beside the plan it applied and give to the next one's Restore: that one then renders and
// compares only the services whose plan changed, as a daemon's datapath does, instead of reading
// every table back. It holds no element: the plan does.
type Committed struct {
	// Namespace is the network namespace the tables are in (namespaceID) and Generation the
	// ruleset's generation there right after the commit: a later transaction, by anyone, or
	// another namespace or boot, makes them differ and the kernel is read again.
	Namespace  string
	Generation uint32
	// DSRDevices are the devices the base chains took dsr traffic on.
	DSRDevices []string
	// Devices are, per service, the device each of its dsr backends was reached through.
	Devices map[string]map[netip.Addr]string
}

// Committed returns what the last Apply committed; false when that is not exactly known (no
// Apply, a failed one, or one with another transaction in between).
func (d *Datapath) Committed() (Committed, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.committed == nil || d.generation == 0 {
		return Committed{}, false
	}
	ns, err := d.host.namespace()
	if err != nil {
		return Committed{}, false
	}
	c := Committed{Namespace: ns, Generation: d.generation, DSRDevices: d.committed.dsrDevices, Devices: map[string]map[netip.Addr]string{}}
	for name, s := range d.committed.services {
		if len(s.devices) > 0 {
			c.Devices[name] = s.devices
		}
	}
	return c, true
}

// Restore makes p, committed as c, the state the next Apply starts from, when the kernel's
// tables still hold it: same namespace and no transaction since (the ruleset's generation). It
// tells whether they do; when not, the next Apply reads the tables as without Restore. The routes
// to dsr backends are looked up again by that Apply, as after a Resync.
func (d *Datapath) Restore(c Committed, p *plan.Plan) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ns, err := d.host.namespace()
	if err != nil || ns != c.Namespace || c.Generation == 0 || d.host.generation() != c.Generation {
		return false, nil
	}
	base, err := renderBase(p, Environment{DSRDevices: c.DSRDevices})
	if err != nil {
		return false, fmt.Errorf("the plan last committed: %w", err)
	}
	prev := &desired{base: base, dsrDevices: c.DSRDevices, services: make(map[string]*renderedService, len(p.Services))}
	for i := range p.Services {
		s := &p.Services[i]
		prev.services[s.Name] = &renderedService{service: *s, devices: c.Devices[s.Name]}
	}
	d.committed, d.generation, d.resync = prev, c.Generation, true
	d.layout.Store(prev)
	return true, nil
}

// namespaceID names the calling thread's network namespace for this boot: the boot's ID and the
// namespace's cookie, which the kernel never gives twice in a boot (an inode number may come back
// with a namespace made after this one is gone).
func namespaceID() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("the network namespace's cookie: %w", err)
	}
	defer unix.Close(fd)
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return "", fmt.Errorf("the network namespace's cookie: %w", err)
	}
	return fmt.Sprintf("%s/%d", strings.TrimSpace(string(boot)), cookie), nil
}
