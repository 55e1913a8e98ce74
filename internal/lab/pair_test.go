package lab

import (
	"net/netip"
	"strings"
	"testing"
)

// TestPairKeepalivedConfig checks the pair's keepalived.conf: node 1 outranks node 2, several
// instances move together in one sync group, the track script asks the given daemon and starts
// failed, so that a node that (re)starts takes no address before its daemon is ready.
func TestPairKeepalivedConfig(t *testing.T) {
	front := VRRPInstance{Name: "front", Iface: "eth0", VRID: 91, Addr: netip.MustParseAddr("10.91.3.254")}
	back := VRRPInstance{Name: "back", Iface: "eth1", VRID: 92, Addr: netip.MustParseAddr("10.91.2.254")}
	one := PairKeepalivedConfig("/usr/bin/sluice", "/run/a.sock", 1, front, back)
	two := PairKeepalivedConfig("/usr/bin/sluice", "/run/b.sock", 2, front, back)
	for _, want := range []string{
		`script "/usr/bin/sluice --socket /run/a.sock node check"`, "init_fail",
		"vrrp_sync_group pair {\n  group {\n    front\n    back\n  }\n}",
		"vrrp_instance front {", "interface eth0", "virtual_router_id 91", "10.91.3.254/24",
		"vrrp_instance back {", "interface eth1", "virtual_router_id 92", "10.91.2.254/24",
		"priority 150", "router_id sluice-lb1",
	} {
		if !strings.Contains(one, want) {
			t.Errorf("node 1's config lacks %q:\n%s", want, one)
		}
	}
	if !strings.Contains(two, "priority 100") || !strings.Contains(two, "/run/b.sock") {
		t.Errorf("node 2's config is not priority 100 asking /run/b.sock:\n%s", two)
	}
	if single := PairKeepalivedConfig("/usr/bin/sluice", "/run/a.sock", 1, front); strings.Contains(single, "vrrp_sync_group") {
		t.Errorf("one instance needs no sync group:\n%s", single)
	}
}
