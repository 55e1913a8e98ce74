// Package decap is the backend side of mode tunnel on hosts without the kernel's ipip/fou
// modules: a tc ingress program (bpf/decap.bpf.c) that strips the IPIP or GUE header of the
// packets a balancer sends to this host and hands the inner packet to the stack, attached per
// interface through a pinned tcx link. Its maps and links are pinned under a directory of their
// own, apart from the balancer's, so that a host may be both.
package decap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultPinPath is where the decapsulation's maps and links are pinned.
const DefaultPinPath = "/sys/fs/bpf/sluice-decap"

// DefaultGUEPort is the UDP port GUE packets arrive on unless told otherwise (as config's).
const DefaultGUEPort = 6080

// linkPrefix starts the pin name of an interface's link.
const linkPrefix = "link-"

// maxLocal is how many of the host's local prefixes decap_local holds (MAX_LOCAL).
const maxLocal = 4096

// Options say where and how the program runs.
type Options struct {
	PinPath   string // DefaultPinPath when empty
	Interface string // the interface tunnel packets arrive on
	GUEPort   uint16 // the GUE port; 0 takes no GUE
}

// Counts are the tunnel packets the program saw, by fate, summed over the CPUs.
type Counts struct {
	IPIP      uint64 `json:"ipip"`      // decapsulated IPIP
	GUE       uint64 `json:"gue"`       // decapsulated GUE
	Malformed uint64 `json:"malformed"` // dropped: truncated or inconsistent
	Foreign   uint64 `json:"foreign"`   // dropped: the inner destination is not this host's
}

// Status is what the decapsulation does on this host.
type Status struct {
	Interfaces    []string `json:"interfaces"`     // attached, sorted
	GUEPort       uint16   `json:"gue_port"`       // 0: no GUE
	LocalPrefixes int      `json:"local_prefixes"` // the host's addresses and AnyIP ranges
	Counts        Counts   `json:"counts"`
}

func (o Options) pinPath() string {
	if o.PinPath == "" {
		return DefaultPinPath
	}
	return o.PinPath
}

// Attach loads the program (adopting the pinned maps, so the counters stay), writes the GUE port
// and the host's current local prefixes (addresses and AnyIP ranges), and makes it run at tc ingress of the interface: a link an
// earlier attach pinned gets the new program in place. Attaching again refreshes the addresses:
// run it after adding a VIP to the host.
func Attach(o Options) error {
	iface, err := net.InterfaceByName(o.Interface)
	if err != nil {
		return fmt.Errorf("interface %q: %w", o.Interface, err)
	}
	pin := o.pinPath()
	if err := ownPins(pin); err != nil {
		return err
	}
	if err := os.MkdirAll(pin, 0o700); err != nil {
		return err
	}
	spec, err := loadDecap()
	if err != nil {
		return err
	}
	var objs decapObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pin}}); err != nil {
		return fmt.Errorf("loading the decapsulation program: %w", err)
	}
	defer objs.Close()
	if err := objs.DecapConfig.Put(uint32(0), decapDecapSettings{GuePort: wirePort(o.GUEPort)}); err != nil {
		return err
	}
	if err := syncLocal(objs.DecapLocal); err != nil {
		return err
	}
	if err := nextEpoch(objs.DecapEpoch); err != nil {
		return err
	}
	return ensureLink(filepath.Join(pin, linkPrefix+o.Interface), iface.Index, objs.SluiceDecap)
}

// ownPins refuses a pin path whose links run in another network namespace: the maps there hold
// that namespace's addresses, which an attach here would overwrite.
func ownPins(pin string) error {
	names, err := attached(pin)
	if err != nil {
		return err
	}
	for _, name := range names {
		path := filepath.Join(pin, linkPrefix+name)
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		at, err := placeOf(l, name)
		l.Close()
		if err != nil {
			return err
		}
		if at == linkElsewhere {
			return fmt.Errorf("%s holds a decapsulation running on an interface that is not this namespace's %s "+
				"(another namespace's): give each namespace a pin path of its own (--pin-path; with --netns "+
				"the default is one per namespace)", pin, name)
		}
	}
	return nil
}

// ensureLink makes prog run at tc ingress of ifindex through the link pinned at path (which
// ownPins found here or gone).
func ensureLink(path string, ifindex int, prog *ebpf.Program) error {
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		defer l.Close()
		if info, err := l.Info(); err == nil && info.TCX() != nil && int(info.TCX().Ifindex) == ifindex {
			return l.Update(prog)
		}
		// the interface was re-created: its link went with the old one
		if err := l.Unpin(); err != nil {
			return err
		}
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return fmt.Errorf("attaching at tc ingress: %w", err)
	}
	defer l.Close()
	return l.Pin(path)
}

// linkPlace is where a pinned link runs, seen from this namespace.
type linkPlace int

const (
	linkGone      linkPlace = iota // its interface was deleted: the link runs nowhere
	linkHere                       // at tc ingress of the interface of this namespace it is named after
	linkElsewhere                  // on an interface of another namespace
)

// placeOf tells where l, pinned for the interface named name, runs. An interface index alone
// cannot tell, as every namespace numbers its interfaces from 1: l must be among the links that
// tc ingress of this namespace's interface runs.
func placeOf(l link.Link, name string) (linkPlace, error) {
	info, err := l.Info()
	if err != nil {
		return 0, fmt.Errorf("reading the pinned link of %s: %w", name, err)
	}
	if tcx := info.TCX(); tcx == nil || tcx.Ifindex == 0 {
		return linkGone, nil
	}
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return linkElsewhere, nil // it runs on an interface this namespace has not
	}
	res, err := link.QueryPrograms(link.QueryOptions{Target: iface.Index, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return 0, fmt.Errorf("listing the programs at tc ingress of %s: %w", name, err)
	}
	for _, p := range res.Programs {
		if id, ok := p.LinkID(); ok && id == info.ID {
			return linkHere, nil
		}
	}
	return linkElsewhere, nil
}

// syncLocal makes decap_local hold exactly the host's local prefixes: those of the local routing
// table's local routes, which every address of the host has, as do AnyIP ranges (a VIP range
// routed `local` to lo), and the host's addresses themselves: the kernel adds an IPv6 address's
// local route from a work queue, after the address (even one without DAD), so an attach right
// after `ip -6 addr add` can find the address before its route.
func syncLocal(m *ebpf.Map) error {
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
	if err != nil {
		return fmt.Errorf("listing the host's local routes: %w", err)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing the host's addresses: %w", err)
	}
	want := map[decapLocalKey]bool{}
	add := func(ip net.IP, bits int) { // bits < 0: a host prefix of ip's family
		addr, ok := netip.AddrFromSlice(ip)
		addr = addr.Unmap()
		if bits < 0 {
			bits = addr.BitLen()
		}
		if p := netip.PrefixFrom(addr, bits); ok && p.IsValid() && !addr.IsLinkLocalUnicast() {
			want[localKeyOf(p)] = true
		}
	}
	for _, r := range routes {
		if r.Dst != nil {
			bits, _ := r.Dst.Mask.Size()
			add(r.Dst.IP, bits)
		}
	}
	for _, a := range addrs {
		if a.IPNet != nil && a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0 { // usable
			add(a.IP, -1)
		}
	}
	if len(want) > maxLocal {
		return fmt.Errorf("the host has %d local prefixes, more than the %d the program holds", len(want), maxLocal)
	}
	var k decapLocalKey
	var v uint8
	var stale []decapLocalKey
	for it := m.Iterate(); it.Next(&k, &v); {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	for k := range want {
		if err := m.Put(k, uint8(1)); err != nil {
			return err
		}
	}
	return nil
}

// nextEpoch adds one to decap_epoch once decap_local has changed, so that no program answers from
// what its memo found in the table before.
func nextEpoch(m *ebpf.Map) error {
	var epoch uint64
	if err := m.Lookup(uint32(0), &epoch); err != nil {
		return err
	}
	return m.Put(uint32(0), epoch+1)
}

// localKeyOf is decap_local's key of a prefix.
func localKeyOf(p netip.Prefix) decapLocalKey {
	a := p.Masked().Addr()
	k := decapLocalKey{Prefixlen: uint32(32 + p.Bits()), Family: unix.AF_INET6}
	if a.Is4() {
		v4 := a.As4()
		copy(k.Addr[:], v4[:])
		k.Family = unix.AF_INET
	} else {
		k.Addr = a.As16()
	}
	return k
}

// wirePort is a port in network byte order as a __be16 field holds it.
func wirePort(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

// Detach stops the program on the interface; once it runs nowhere, its maps' pins go too.
func Detach(o Options) error {
	pin := o.pinPath()
	path := filepath.Join(pin, linkPrefix+o.Interface)
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("decapsulation is not attached to %s", o.Interface)
	}
	if err != nil {
		return err
	}
	err = l.Unpin()
	l.Close()
	if err != nil {
		return err
	}
	left, err := attached(pin)
	if err != nil || len(left) > 0 {
		return err
	}
	for _, name := range []string{decapMapDecapLocal, decapMapDecapEpoch, decapMapDecapConfig, decapMapDecapStats} {
		if err := os.Remove(filepath.Join(pin, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Remove(pin)
}

// attached lists the interfaces with a pinned link under pin.
func attached(pin string) ([]string, error) {
	entries, err := os.ReadDir(pin)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutPrefix(e.Name(), linkPrefix); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ReadStatus reads what the decapsulation does on this host from its pins; a host where it was
// never attached has an empty status.
func ReadStatus(o Options) (Status, error) {
	pin := o.pinPath()
	var st Status
	ifaces, err := attached(pin)
	if err != nil || len(ifaces) == 0 {
		return st, err
	}
	st.Interfaces = ifaces
	open := func(name string) (*ebpf.Map, error) {
		return ebpf.LoadPinnedMap(filepath.Join(pin, name), &ebpf.LoadPinOptions{ReadOnly: true})
	}
	cfg, err := open(decapMapDecapConfig)
	if err != nil {
		return st, err
	}
	defer cfg.Close()
	var settings decapDecapSettings
	if err := cfg.Lookup(uint32(0), &settings); err != nil {
		return st, err
	}
	st.GUEPort = wirePort(settings.GuePort)
	local, err := open(decapMapDecapLocal)
	if err != nil {
		return st, err
	}
	defer local.Close()
	var k decapLocalKey
	var v uint8
	for it := local.Iterate(); it.Next(&k, &v); {
		st.LocalPrefixes++
	}
	stats, err := open(decapMapDecapStats)
	if err != nil {
		return st, err
	}
	defer stats.Close()
	var perCPU []decapDecapCounts
	if err := stats.Lookup(uint32(0), &perCPU); err != nil {
		return st, err
	}
	st.Counts = sumCounts(perCPU)
	return st, nil
}

// sumCounts adds up the per-CPU counters.
func sumCounts(perCPU []decapDecapCounts) Counts {
	var c Counts
	for _, p := range perCPU {
		c.IPIP += p.Ipip
		c.GUE += p.Gue
		c.Malformed += p.Malformed
		c.Foreign += p.Foreign
	}
	return c
}
