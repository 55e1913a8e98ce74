package nft

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The netlink reads of this package against the libraries that could replace them, at the sizes
// Sluice supports: a slots map of a service holds up to 65,537 elements, the conntrack table of
// a balancer tens of thousands of entries. docs/nftables-datapath.md ("Why the netlink reads are
// Sluice's own") has the numbers.

// benchSetSizes are the element counts of the map read back.
var benchSetSizes = []int{10_000, 100_000}

// benchChains is how many backend chains the map's verdicts go to.
const benchChains = 16

// BenchmarkReadSetElements reads a slots-like map (mark : goto a backend chain) of n elements
// with readElements and with google/nftables' GetSetElements.
func BenchmarkReadSetElements(b *testing.B) {
	for _, n := range benchSetSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchReadSet(b, n) })
	}
}

// benchReadSet runs the two readers of BenchmarkReadSetElements on a map of n elements.
func benchReadSet(b *testing.B, n int) {
	b.Run("own", func(b *testing.B) {
		inFreshNetns(b, func() {
			benchMap(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				def := newState().addSet(knftables.InetFamily, &knftables.Map{Name: "bench-slots"})
				if err := readElements(def, knftables.InetFamily, "bench-slots"); err != nil {
					b.Fatal(err)
				}
				if len(def.elems) != n {
					b.Fatalf("read %d elements, want %d", len(def.elems), n)
				}
			}
		})
	})
	b.Run("google-nftables", func(b *testing.B) {
		inFreshNetns(b, func() {
			benchMap(b, n)
			conn, err := nftables.New() // each call dials in the calling thread's namespace
			if err != nil {
				b.Fatal(err)
			}
			set, err := conn.GetSetByName(&nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}, "bench-slots")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				elems, err := conn.GetSetElements(set)
				if err != nil {
					b.Fatal(err)
				}
				if len(elems) != n {
					b.Fatalf("read %d elements, want %d", len(elems), n)
				}
			}
		})
	})
}

// benchMap makes Sluice's inet table with a map bench-slots of n elements, slot : goto one of
// benchChains chains, in one `nft -f`.
func benchMap(b *testing.B, n int) {
	b.Helper()
	var s strings.Builder
	fmt.Fprintf(&s, "add table inet %s\n", TableName)
	for c := range benchChains {
		fmt.Fprintf(&s, "add chain inet %s be%d\n", TableName, c)
	}
	fmt.Fprintf(&s, "add map inet %s bench-slots { type mark : verdict; }\n", TableName)
	for i := range n {
		fmt.Fprintf(&s, "add element inet %s bench-slots { %d : goto be%d }\n", TableName, i, i%benchChains)
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(s.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("nft -f: %v: %s", err, out)
	}
}

// benchConntrackEntries is the number of conntrack entries dumped.
const benchConntrackEntries = 10_000

// BenchmarkConntrackDump dumps benchConntrackEntries established TCP entries with dumpConntrack
// and with ti-mo/conntrack's Dump.
func BenchmarkConntrackDump(b *testing.B) {
	b.Run("own", func(b *testing.B) {
		inFreshNetns(b, func() {
			benchConntrack(b)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				entries, err := dumpConntrack(unix.AF_INET)
				if err != nil {
					b.Fatal(err)
				}
				if len(entries) != benchConntrackEntries {
					b.Fatalf("dumped %d entries, want %d", len(entries), benchConntrackEntries)
				}
			}
		})
	})
	b.Run("ti-mo-conntrack", func(b *testing.B) {
		inFreshNetns(b, func() {
			benchConntrack(b)
			conn, err := conntrack.Dial(nil) // in the calling thread's namespace
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				flows, err := conn.Dump(nil)
				if err != nil {
					b.Fatal(err)
				}
				if len(flows) != benchConntrackEntries {
					b.Fatalf("dumped %d flows, want %d", len(flows), benchConntrackEntries)
				}
			}
		})
	})
}

// benchConntrack creates benchConntrackEntries established TCP entries to 10.91.9.100:80, one
// netlink request each: 0.3 s in all, where `conntrack -I`, a process each, takes 20 s.
func benchConntrack(b *testing.B) {
	b.Helper()
	vip := net.ParseIP("10.91.9.100").To4() // the library writes a 16-byte address as 0.0.0.0
	for i := range benchConntrackEntries {
		client := net.ParseIP("10.92." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff)).To4()
		flow := &netlink.ConntrackFlow{
			FamilyType: unix.AF_INET,
			Forward:    netlink.IPTuple{SrcIP: client, DstIP: vip, SrcPort: 40000, DstPort: 80, Protocol: unix.IPPROTO_TCP},
			Reverse:    netlink.IPTuple{SrcIP: backend11.AsSlice(), DstIP: client, SrcPort: 80, DstPort: 40000, Protocol: unix.IPPROTO_TCP},
			TimeOut:    300,
			ProtoInfo:  &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_ESTABLISHED},
		}
		if err := netlink.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, flow); err != nil {
			b.Fatalf("creating conntrack entry %d: %v", i, err)
		}
	}
}
