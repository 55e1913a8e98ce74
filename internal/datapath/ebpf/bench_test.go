package ebpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
)

// BenchmarkProgRun reports the program's own time per packet ("prog-ns/pkt": the duration
// BPF_PROG_TEST_RUN measures around the program, not the syscall around it) for a flow's first
// packet (a SYN from a new client address and port: Maglev pick, the flow entry and for nat the
// reply entry written into tables of the default size that are not full) and for an established
// flow's packet, in nat and dsr, with 1, 1,000 and 10,000 services loaded, on tc and XDP. Each
// run is one packet on a fresh copy of the frame, routed for real in the fixture network.
func BenchmarkProgRun(b *testing.B) {
	n := newFxNet(b)
	for _, h := range []hook{hookTC, hookXDP} {
		for _, mode := range []config.Mode{config.ModeNAT, config.ModeDSR} {
			for _, services := range []int{1, 1000, 10000} {
				b.Run(fmt.Sprintf("%s/%s/services=%d", h, mode, services), func(b *testing.B) {
					benchProgRun(b, n, h, mode, services)
				})
			}
		}
	}
}

// benchProgRun is one BenchmarkProgRun case: a new flow's packet and an established one's.
func benchProgRun(b *testing.B, n *fxNet, h hook, mode config.Mode, services int) {
	objs := loadBenchWorld(b, services, mode)
	if err := objs.IfMacs.Put(n.client, sluiceIfMac{Addr: [6]byte(macLBClient)}); err != nil {
		b.Fatal(err) // recorded, as Apply does for XDP: the frames are for it
	}
	vip := ap(benchVIP(services), 80) // the last service's
	b.Run("new-flow", func(b *testing.B) {
		n.enter(b)
		benchRun(b, h, objs, tcpPkt(cli4, vip).synPkt().frame(), n.client, true)
	})
	b.Run("established", func(b *testing.B) {
		n.enter(b)
		benchRun(b, h, objs, tcpPkt(cli4, vip).frame(), n.client, false)
	})
}

// benchClients counts the benchmark's new flows, each from a client address and port of its own.
var benchClients int

// benchRingSize is the size of each benchmark service's Maglev table.
const benchRingSize = 251

// benchVIP is the VIP of benchmark service id.
func benchVIP(id int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(id >> 8), byte(id)}) }

// loadBenchWorld loads the programs with services services of a mode to the backends of the
// fixture network with neighbours (ids 1-3, filling every ring in turn).
func loadBenchWorld(b *testing.B, services int, mode config.Mode) *sluiceObjects {
	objs := loadUnpinned(b, map[string]uint32{
		sluiceMapMaglev: uint32(services+1) * benchRingSize,
	})
	for id, a := range map[uint32]netip.Addr{1: b1v4, 2: b2v4, 3: b3v4} {
		w, family := wireAddr(a)
		if err := objs.Backends.Put(id, sluiceBackend{Addr: w, Family: family, Flags: sluiceBackendFlagsBACKEND_VALID}); err != nil {
			b.Fatal(err)
		}
	}
	var slots, ids []uint32
	var keys []sluiceVipKey
	var values []sluiceService
	for id := 1; id <= services; id++ {
		for i := range uint32(benchRingSize) {
			slots = append(slots, uint32(id)*benchRingSize+i)
			ids = append(ids, 1+(uint32(id)+i)%3)
		}
		keys = append(keys, vipKeyOf(benchVIP(id), 80, protoTCP))
		values = append(values, sluiceService{Id: uint32(id), RingOffset: uint32(id) * benchRingSize, RingSize: benchRingSize, Mode: wireModes[mode]})
	}
	if _, err := objs.Maglev.BatchUpdate(slots, ids, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := objs.Vips.BatchUpdate(keys, values, nil); err != nil {
		b.Fatal(err)
	}
	return objs
}

// benchRun runs the hook's program b.N times, one packet each, and reports its mean time per
// packet. newFlows gives every packet a client address and port never seen before.
func benchRun(b *testing.B, h hook, objs *sluiceObjects, frame []byte, ifindex uint32, newFlows bool) {
	prog := h.program(objs)
	ctx := h.runContext(len(frame), ifindex)
	if v, _ := h.run(b, objs, frame, ifindex); h.verdictOf(v) != vRedirect {
		b.Fatalf("the benchmark packet is not forwarded (%v)", h.verdictOf(v))
	}
	var total uint64
	b.ResetTimer()
	for range b.N {
		if newFlows {
			benchClients++
			frame[14+15] = byte(benchClients >> 16)                         // client address, last byte
			binary.BigEndian.PutUint16(frame[14+20:], uint16(benchClients)) // client port
		}
		total += uint64(testRunDuration(b, prog, frame, ctx))
	}
	b.ReportMetric(float64(total)/float64(b.N), "prog-ns/pkt")
}

// testRunAttr is the test member of union bpf_attr (BPF_PROG_TEST_RUN). cilium/ebpf returns the
// kernel's duration only without a context, and the context carries the ingress interface that
// the route lookup needs.
type testRunAttr struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration                        uint32
	ctxSizeIn, ctxSizeOut                   uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize, _                uint32
}

// testRunDuration runs prog once on frame with context ctx and returns the kernel's measure of
// the run in nanoseconds.
func testRunDuration(b *testing.B, prog *ebpf.Program, frame []byte, ctx any) uint32 {
	ctxIn, err := binary.Append(nil, binary.NativeEndian, ctx)
	if err != nil {
		b.Fatal(err)
	}
	attr := testRunAttr{
		progFD: uint32(prog.FD()), dataSizeIn: uint32(len(frame)), dataIn: uint64(uintptr(unsafe.Pointer(&frame[0]))),
		repeat: 1, ctxSizeIn: uint32(len(ctxIn)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctxIn[0]))),
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(frame)
	runtime.KeepAlive(ctxIn)
	if errno != 0 {
		b.Fatalf("BPF_PROG_TEST_RUN: %v", errno)
	}
	return attr.duration
}
