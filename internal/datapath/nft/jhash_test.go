package nft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// jhashFlows is the number of flows of each protocol and IP version the kernel hashes.
const jhashFlows = 200

// TestKernelJHashMatchesFlowSlot: the kernel itself hashes flows with the selectors rendering
// writes (maglev's 5-tuple; sh's source address, with and without its port), at several moduli
// (up to nearly 2^32, which shows almost the whole hash), and records each flow's slot by its
// source port in a map; flowSlot and shSlot must give every flow the same slot, for TCP and UDP
// over IPv4 and IPv6. The packets are a SYN or a datagram from a bound source port, seen by an
// output hook.
func TestKernelJHashMatchesFlowSlot(t *testing.T) {
	if got := fmt.Sprintf("%#x", jhashSeed); got != hashSeed {
		t.Fatalf("jhashSeed %s, the rendered seed %s", got, hashSeed)
	}
	moduli := []uint32{7, 65537, 4294967291}
	inFreshNetns(t, func() {
		veth0, _ := netlink.LinkByName("veth0")
		for _, a := range []string{"10.91.2.2/24", "fd00:91:2::2/64"} { // fd00:91:2::1 is inFreshNetns's
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(veth0, addr); err != nil {
				t.Fatal(err)
			}
		}
		const table = "hashing"
		nft, err := knftables.New(knftables.InetFamily, table)
		if err != nil {
			t.Fatal(err)
		}
		tx := nft.NewTransaction()
		tx.Add(&knftables.Table{Family: knftables.InetFamily, Name: table})
		chain := &knftables.Chain{Family: knftables.InetFamily, Table: table, Name: "out",
			Type: ptr(knftables.FilterType), Hook: ptr(knftables.OutputHook), Priority: ptr(knftables.FilterPriority)}
		tx.Add(chain)
		kinds := flowKinds()
		for _, k := range kinds {
			for _, m := range moduli {
				tx.Add(&knftables.Map{Family: knftables.InetFamily, Table: table, Name: k.mapName(m), Type: "inet_service : mark", Flags: []knftables.SetFlag{knftables.DynamicFlag}})
				// The selector as rendered for a service of 7 slots, at modulus m.
				sel := strings.Replace(selector(&k.service), " mod 7 ", fmt.Sprintf(" mod %d ", m), 1)
				tx.Add(&knftables.Rule{Family: knftables.InetFamily, Table: table, Chain: chain.Name,
					Rule: fmt.Sprintf("meta l4proto %s meta mark set %s update @%s { %s sport : meta mark }", k.proto, sel, k.mapName(m), k.proto)})
			}
		}
		if err := nft.Run(context.Background(), tx); err != nil {
			t.Fatal(err)
		}

		for _, k := range kinds {
			flows := k.flows()
			for _, f := range flows {
				if err := sendFirstPacket(k.proto, f.src, f.dst); err != nil {
					t.Fatalf("%s %s -> %s: %v", k.proto, f.src, f.dst, err)
				}
			}
			for _, m := range moduli {
				elems, err := nft.ListElements(context.Background(), "map", k.mapName(m))
				if err != nil {
					t.Fatal(err)
				}
				slots := map[uint16]uint32{}
				for _, e := range elems {
					port, err1 := strconv.ParseUint(e.Key[0], 0, 16)
					slot, err2 := strconv.ParseUint(e.Value[0], 0, 32)
					if err1 != nil || err2 != nil {
						t.Fatalf("element %v: %v %v", e, err1, err2)
					}
					slots[uint16(port)] = uint32(slot)
				}
				if len(slots) != len(flows) {
					t.Errorf("%s mod %d: the kernel hashed %d flows, want %d", k.mapName(m), m, len(slots), len(flows))
				}
				wrong := 0
				for _, f := range flows {
					kernel, ok := slots[f.src.Port()]
					if want := k.slot(f, m); ok && kernel != want {
						if wrong++; wrong <= 3 {
							t.Errorf("%s %s -> %s mod %d: the kernel's slot %d, ours %d", k.mapName(m), f.src, f.dst, m, kernel, want)
						}
					}
				}
				if wrong > 0 {
					t.Errorf("%s mod %d: %d of %d flows in another slot", k.mapName(m), m, wrong, len(flows))
				}
			}
		}
	})
}

// flowKind is one protocol, IP version and hashing scheduler of the jhash test.
type flowKind struct {
	proto   string
	service plan.Service // what selector renders the rule from
	srcs    []netip.Addr
	dsts    []netip.Addr
}

func flowKinds() []flowKind {
	v4src := []netip.Addr{netip.MustParseAddr("10.91.2.1"), netip.MustParseAddr("10.91.2.2")}
	v4dst := []netip.Addr{netip.MustParseAddr("10.91.2.97"), netip.MustParseAddr("10.91.2.98"), netip.MustParseAddr("10.91.2.99")}
	v6src := []netip.Addr{netip.MustParseAddr("fd00:91:2::1"), netip.MustParseAddr("fd00:91:2::2")}
	v6dst := []netip.Addr{netip.MustParseAddr("fd00:91:2::97"), netip.MustParseAddr("fd00:91:2::ffff:98")}
	var kinds []flowKind
	for _, proto := range []string{"tcp", "udp"} {
		for _, v := range [][2][]netip.Addr{{v4src, v4dst}, {v6src, v6dst}} {
			for _, sched := range []struct {
				scheduler config.Scheduler
				shPort    bool
			}{{"maglev", false}, {"sh", false}, {"sh", true}} {
				s := plan.Service{Protocol: config.Protocol(proto), VIP: v[1][0], Scheduler: sched.scheduler, SHPort: sched.shPort, Slots: make([]int, 7)}
				kinds = append(kinds, flowKind{proto: proto, service: s, srcs: v[0], dsts: v[1]})
			}
		}
	}
	return kinds
}

func (k flowKind) mapName(modulus uint32) string {
	name := fmt.Sprintf("%s%s-%s-%d", k.proto, ipvOf(k.service.VIP).suffix, k.service.Scheduler, modulus)
	if k.service.SHPort {
		name += "-port"
	}
	return name
}

// slot is the slot, of modulus, that Which expects the kind's selector to give f.
func (k flowKind) slot(f testFlow, modulus uint32) uint32 {
	if k.service.Scheduler == config.SchedulerSH {
		return shSlot(f.src, k.service.SHPort, int(modulus))
	}
	return flowSlot(f.src, f.dst, int(modulus))
}

type testFlow struct{ src, dst netip.AddrPort }

// flows are jhashFlows flows with distinct source ports, over the kind's addresses and a few
// destination ports.
func (k flowKind) flows() []testFlow {
	out := make([]testFlow, jhashFlows)
	for i := range out {
		out[i] = testFlow{
			src: netip.AddrPortFrom(k.srcs[i%len(k.srcs)], uint16(30000+i*97%20000)),
			dst: netip.AddrPortFrom(k.dsts[i%len(k.dsts)], uint16(80+i%5*1111)),
		}
	}
	return out
}

// sendFirstPacket sends the first packet of a flow from a socket bound to src: a SYN (a
// non-blocking connect that nothing answers) or a datagram.
func sendFirstPacket(proto string, src, dst netip.AddrPort) error {
	family, typ := unix.AF_INET, unix.SOCK_STREAM
	if src.Addr().Is6() {
		family = unix.AF_INET6
	}
	if proto == "udp" {
		typ = unix.SOCK_DGRAM
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := unix.Bind(fd, sockaddr(src)); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if proto == "udp" {
		return unix.Sendto(fd, []byte("q"), 0, sockaddr(dst))
	}
	if err := unix.Connect(fd, sockaddr(dst)); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return fmt.Errorf("connect: %w", err)
	}
	return nil
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

// TestFlowHashKeyLayout pins the registers the selector hashes: each field padded to 4 bytes,
// ports in network byte order.
func TestFlowHashKeyLayout(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.91.1.2:40000"), netip.MustParseAddrPort("10.91.9.100:80")
	key := flowHashKey(src, dst)
	if want := []byte{10, 91, 1, 2, 0x9c, 0x40, 0, 0, 10, 91, 9, 100, 0, 80, 0, 0}; !bytes.Equal(key, want) {
		t.Errorf("key %x, want %x", key, want)
	}
	if n := len(flowHashKey(netip.MustParseAddrPort("[fd00::1]:1"), netip.MustParseAddrPort("[fd00::2]:2"))); n != 40 {
		t.Errorf("IPv6 key of %d bytes, want 40", n)
	}
}
