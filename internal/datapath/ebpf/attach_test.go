package ebpf

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/plan"
)

// pinnedLinks lists the pin names under the links directory.
func (r *rig) pinnedLinks() []string {
	r.t.Helper()
	entries, err := os.ReadDir(filepath.Join(r.pin, linksDir))
	if err != nil {
		r.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// linkInfo reads a pinned link's info.
func (r *rig) linkInfo(pin string) *link.Info {
	r.t.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(r.pin, linksDir, pin), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		r.t.Fatal(err)
	}
	return info
}

// tcxPrograms counts the programs attached at tcx ingress of an interface.
func (r *rig) tcxPrograms(ifname string) int {
	r.t.Helper()
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindexOf(r.t, ifname), Attach: ebpf.AttachTCXIngress})
	if err != nil {
		r.t.Fatal(err)
	}
	return len(res.Programs)
}

func ifindexOf(t *testing.T, name string) int {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

func progIDOf(t *testing.T, p *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

// TestAttachPinsAndReusesTheLink attaches to veth0 at tcx ingress and pins the link; a restarted
// Datapath adopts that link and, the program being the same, leaves it as it is.
func TestAttachPinsAndReusesTheLink(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	if got := r.pinnedLinks(); !slices.Equal(got, []string{"veth0-tc"}) {
		t.Fatalf("pinned links %v, want [veth0-tc]", got)
	}
	info := r.linkInfo("veth0-tc")
	if info.TCX() == nil || int(info.TCX().Ifindex) != ifindexOf(t, "veth0") || ebpf.AttachType(info.TCX().AttachType) != ebpf.AttachTCXIngress {
		t.Fatalf("link %+v is not at tcx ingress of veth0", info.TCX())
	}
	if info.Program != progIDOf(t, d.prog) {
		t.Errorf("the link runs program %d, not the loaded %d", info.Program, progIDOf(t, d.prog))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := r.datapath(Options{})
	r.apply(restarted, planFromYAML(t, oneService))
	again := r.linkInfo("veth0-tc")
	if again.ID != info.ID || again.Program != info.Program {
		t.Errorf("after a restart: link %d running program %d, want link %d running %d", again.ID, again.Program, info.ID, info.Program)
	}
}

// TestAttachReplacesAnotherProgram finds a link of an older program (a pass-all stand-in): it
// keeps the link and swaps the program in place.
func TestAttachReplacesAnotherProgram(t *testing.T) {
	r := newRig(t)
	if err := preparePinPath(r.pin); err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}, // TC_ACT_UNSPEC
	})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	l, err := link.AttachTCX(link.TCXOptions{Program: old, Interface: ifindexOf(t, "veth0"), Attach: ebpf.AttachTCXIngress})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Pin(filepath.Join(r.pin, linksDir, "veth0-tc")); err != nil {
		t.Fatal(err)
	}
	before, _ := l.Info()
	l.Close()

	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	after := r.linkInfo("veth0-tc")
	if after.ID != before.ID {
		t.Errorf("the link was replaced (%d, was %d); want its program updated in place", after.ID, before.ID)
	}
	if after.Program != progIDOf(t, d.prog) {
		t.Errorf("the link runs program %d, want the loaded %d", after.Program, progIDOf(t, d.prog))
	}
}

// TestAttachFollowsTheTargets attaches by default to every interface that is up, then follows a
// change of interfaces and of attach mode, detaching what is no longer wanted, and re-attaches
// to an interface that was deleted and created again.
func TestAttachFollowsTheTargets(t *testing.T) {
	r := newRig(t)
	empty := &plan.Plan{}
	r.apply(r.datapath(Options{Interfaces: []string{}}), empty)
	if got := r.pinnedLinks(); !slices.Equal(got, []string{"veth0-tc", "veth1-tc"}) {
		t.Fatalf("by default, pinned links %v, want [veth0-tc veth1-tc]", got)
	}
	d := r.datapath(Options{Interfaces: []string{"veth1"}, Attach: AttachXDP})
	r.apply(d, empty)
	if got := r.pinnedLinks(); !slices.Equal(got, []string{"veth1-xdp"}) {
		t.Fatalf("pinned links %v, want [veth1-xdp]", got)
	}
	if n := r.tcxPrograms("veth0"); n != 0 {
		t.Errorf("%d programs still run at tcx ingress of veth0", n)
	}
	if info := r.linkInfo("veth1-xdp"); info.XDP() == nil || int(info.XDP().Ifindex) != ifindexOf(t, "veth1") {
		t.Fatalf("link %+v is not at XDP of veth1", info)
	}

	veth, err := netlink.LinkByName("veth1")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(veth); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth1"}, PeerName: "veth2"}); err != nil {
		t.Fatal(err)
	}
	r.apply(d, empty)
	if info := r.linkInfo("veth1-xdp"); int(info.XDP().Ifindex) != ifindexOf(t, "veth1") {
		t.Errorf("the link is at ifindex %d, want the new veth1's %d", info.XDP().Ifindex, ifindexOf(t, "veth1"))
	}
}

// pinnedMACs reads if_macs as pinned, ifindex to MAC.
func (r *rig) pinnedMACs() map[int]string {
	r.t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(r.pin, sluiceMapIfMacs), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	defer m.Close()
	out := map[int]string{}
	var k uint32
	var v sluiceIfMac
	for it := m.Iterate(); it.Next(&k, &v); {
		out[int(k)] = net.HardwareAddr(v.Addr[:]).String()
	}
	return out
}

// macsOf is what if_macs must hold for XDP on the named interfaces.
func macsOf(t *testing.T, names ...string) map[int]string {
	t.Helper()
	out := map[int]string{}
	for _, name := range names {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		out[l.Attrs().Index] = l.Attrs().HardwareAddr.String()
	}
	return out
}

// TestAttachRecordsXDPInterfaceMACs: on XDP, if_macs holds the MAC of every interface the program
// runs on, follows a MAC change at the next apply and a change of interfaces, and is emptied on
// tc, whose program reads the packet type instead.
func TestAttachRecordsXDPInterfaceMACs(t *testing.T) {
	r := newRig(t)
	empty := &plan.Plan{}
	d := r.datapath(Options{Attach: AttachXDP})
	r.apply(d, empty)
	if got, want := r.pinnedMACs(), macsOf(t, "veth0"); !maps.Equal(got, want) {
		t.Fatalf("if_macs %v, want %v", got, want)
	}
	veth0, err := netlink.LinkByName("veth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetHardwareAddr(veth0, net.HardwareAddr{2, 0, 0, 0, 0x91, 1}); err != nil {
		t.Fatal(err)
	}
	if n := r.apply(d, empty); n != 1 {
		t.Errorf("the apply after a MAC change wrote %d entries, want 1", n)
	}
	if got, want := r.pinnedMACs(), macsOf(t, "veth0"); !maps.Equal(got, want) {
		t.Fatalf("after a MAC change, if_macs %v, want %v", got, want)
	}
	if n := r.apply(d, empty); n != 0 {
		t.Errorf("an apply that changes nothing wrote %d entries", n)
	}
	r.apply(r.datapath(Options{Attach: AttachXDP, Interfaces: []string{"veth1"}}), empty)
	if got, want := r.pinnedMACs(), macsOf(t, "veth1"); !maps.Equal(got, want) {
		t.Fatalf("on veth1, if_macs %v, want %v", got, want)
	}
	r.apply(r.datapath(Options{}), empty)
	if got := r.pinnedMACs(); len(got) != 0 {
		t.Fatalf("on tc, if_macs %v, want it empty", got)
	}
}
