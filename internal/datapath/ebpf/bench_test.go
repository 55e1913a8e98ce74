package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
)

// BenchmarkProgRun reports the program's own time per packet ("prog-ns/pkt": the duration
// BPF_PROG_TEST_RUN measures around the program, not the syscall around it) for a flow's first
// packet (a SYN from a new client address and port: Maglev pick, the flow entry and for nat the
// reply entry written into tables of the default size that are not full) and for an established
// flow's packet, in nat, fullnat (from the node's source and from each service's own) and dsr,
// with 1, 1,000 and 10,000 services loaded, on tc and XDP. Each run is one packet on a fresh copy
// of the frame, routed for real in the fixture network.
func BenchmarkProgRun(b *testing.B) {
	n := newFxNet(b)
	for _, h := range []hook{hookTC, hookXDP} {
		for _, m := range benchModes {
			for _, services := range []int{1, 1000, 10000} {
				b.Run(fmt.Sprintf("%s/%s/services=%d", h, m.name, services), func(b *testing.B) {
					benchProgRun(b, n, h, m.mode, m.own, services)
				})
			}
		}
	}
}

// benchModes are BenchmarkProgRun's modes; own gives every service its own fullnat source.
var benchModes = []struct {
	name string
	mode config.Mode
	own  bool
}{
	{"nat", config.ModeNAT, false}, {"fullnat", config.ModeFullNAT, false},
	{"fullnat_source", config.ModeFullNAT, true}, {"dsr", config.ModeDSR, false},
}

// benchProgRun is one BenchmarkProgRun case: a new flow's packet and an established one's.
func benchProgRun(b *testing.B, n *fxNet, h hook, mode config.Mode, own bool, services int) {
	objs := loadBenchWorld(b, services, mode)
	if own {
		ownBenchSources(b, objs, services)
	}
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
	return loadBenchWorldEdited(b, services, mode, func(*ebpf.MapSpec) {})
}

// loadBenchWorldEdited is loadBenchWorld with edit applied to every map's spec before loading.
func loadBenchWorldEdited(b *testing.B, services int, mode config.Mode, edit func(*ebpf.MapSpec)) *sluiceObjects {
	objs := loadUnpinnedEdited(b, map[string]uint32{
		sluiceMapMaglev: uint32(services+1) * benchRingSize,
	}, edit)
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
	g := sluiceGlobals{Snat4: lbBackend4.As4(), PortLow: fullnatPortLow, PortHigh: fullnatPortHigh}
	if err := objs.Config.Put(uint32(0), g); err != nil {
		b.Fatal(err)
	}
	return objs
}

// ownBenchSources gives each benchmark service its own fullnat source, another address of the
// fixture network's backend side than the node's.
func ownBenchSources(b *testing.B, objs *sluiceObjects, services int) {
	g := sluiceGlobals{Snat4: mustAddr("10.0.2.250").As4(), PortLow: fullnatPortLow, PortHigh: fullnatPortHigh}
	var v sluiceService
	for id := 1; id <= services; id++ {
		k := vipKeyOf(benchVIP(id), 80, protoTCP)
		err := objs.ServiceSources.Put(uint32(id), g)
		if err == nil {
			err = objs.Vips.Lookup(k, &v)
		}
		if err == nil {
			v.Source = sluiceServiceSourceSOURCE_OWN
			err = objs.Vips.Put(k, v)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
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
	d, err := testRun(prog, frame, ctxIn)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// testRun runs prog once on frame with the encoded context ctxIn and returns the kernel's
// measure of the run in nanoseconds.
func testRun(prog *ebpf.Program, frame, ctxIn []byte) (uint32, error) {
	attr := testRunAttr{
		progFD: uint32(prog.FD()), dataSizeIn: uint32(len(frame)), dataIn: uint64(uintptr(unsafe.Pointer(&frame[0]))),
		repeat: 1, ctxSizeIn: uint32(len(ctxIn)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctxIn[0]))),
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(frame)
	runtime.KeepAlive(ctxIn)
	if errno != 0 {
		return 0, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
	}
	return attr.duration, nil
}

// BenchmarkNewFlowsOnTwoCPUs runs new flows through the tc program on two CPUs at once, one
// thread pinned to each, with the flow and reply tables keeping one LRU free list per CPU (as
// the loader makes them) and one common list (as versions before 2026-11 pinned them), to show
// what the per-CPU lists save when CPUs insert at the same time. It reports the program's mean
// time per packet over both CPUs.
func BenchmarkNewFlowsOnTwoCPUs(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs two CPUs")
	}
	n := newFxNet(b)
	lists := []struct {
		name string
		edit func(*ebpf.MapSpec)
	}{
		{"per-cpu-lru", func(*ebpf.MapSpec) {}},
		{"common-lru", func(ms *ebpf.MapSpec) { ms.Flags &^= noCommonLRU }},
	}
	for _, mode := range []config.Mode{config.ModeNAT, config.ModeDSR} {
		for _, l := range lists {
			b.Run(fmt.Sprintf("%s/%s", mode, l.name), func(b *testing.B) {
				objs := loadBenchWorldEdited(b, 1, mode, l.edit)
				if got := objs.Flows.Flags() & noCommonLRU; (got != 0) != (l.name == "per-cpu-lru") {
					b.Fatalf("flows has flags %#x", objs.Flows.Flags())
				}
				frame := tcpPkt(cli4, ap(benchVIP(1), 80)).synPkt().frame()
				var total [2]uint64
				var errs [2]error
				var wg sync.WaitGroup
				b.ResetTimer()
				for cpu := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						total[cpu], errs[cpu] = runNewFlowsOnCPU(n, objs, slices.Clone(frame), cpu, b.N)
					}()
				}
				wg.Wait()
				if err := errors.Join(errs[:]...); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(total[0]+total[1])/float64(2*b.N), "prog-ns/pkt")
			})
		}
	}
}

// runNewFlowsOnCPU runs count new flows' first packets through the tc program on a thread pinned
// to cpu in the fixture network, each from a client address and port of its own (the second
// byte of the address is the CPU's), and returns the program's total time.
func runNewFlowsOnCPU(n *fxNet, objs *sluiceObjects, frame []byte, cpu, count int) (total uint64, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	if err := netns.Set(n.ns); err != nil {
		return 0, err
	}
	defer func() {
		if berr := netns.Set(orig); berr != nil {
			panic(berr) // a thread must never stay in a test namespace
		}
	}()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return 0, err
	}
	ctx, err := binary.Append(nil, binary.NativeEndian, hookTC.runContext(len(frame), n.client))
	if err != nil {
		return 0, err
	}
	frame[14+13] = byte(cpu)
	for i := range count {
		frame[14+14] = byte(i >> 24)
		frame[14+15] = byte(i >> 16)
		binary.BigEndian.PutUint16(frame[14+20:], uint16(i))
		d, err := testRun(objs.SluiceTc, frame, ctx)
		if err != nil {
			return 0, err
		}
		total += uint64(d)
	}
	return total, nil
}

// BenchmarkNewFlowEvents reports a new flow's program time ("prog-ns/pkt") with the flow events
// off (no replicator watches: the flag's test alone) and on (each new flow written to
// flow_events, drained meanwhile by a reader polling as WatchFlows does), on tc and XDP, in nat
// and dsr, with one service. It reports the events a full ring lost ("drops").
func BenchmarkNewFlowEvents(b *testing.B) {
	n := newFxNet(b)
	for _, h := range []hook{hookTC, hookXDP} {
		for _, mode := range []config.Mode{config.ModeNAT, config.ModeDSR} {
			for _, on := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/%s/events=%v", h, mode, on), func(b *testing.B) {
					objs := loadBenchWorld(b, 1, mode)
					if err := objs.IfMacs.Put(n.client, sluiceIfMac{Addr: [6]byte(macLBClient)}); err != nil {
						b.Fatal(err)
					}
					if on {
						drainInBackground(b, objs)
					}
					n.enter(b)
					benchRun(b, h, objs, tcpPkt(cli4, ap(benchVIP(1), 80)).synPkt().frame(), n.client, true)
					var per []uint64
					if err := objs.FlowEventDrops.Lookup(uint32(0), &per); err != nil {
						b.Fatal(err)
					}
					var drops uint64
					for _, c := range per {
						drops += c
					}
					b.ReportMetric(float64(drops), "drops")
				})
			}
		}
	}
}

// drainInBackground turns the flow events on and reads them as they come, until the benchmark
// ends.
func drainInBackground(b *testing.B, objs *sluiceObjects) {
	if _, err := putFlowEvents(objs.Config, true); err != nil {
		b.Fatal(err)
	}
	rd, err := ringbuf.NewReader(objs.FlowEvents)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rec ringbuf.Record
		for {
			rd.SetDeadline(time.Now().Add(flowEventsWait))
			err := rd.ReadInto(&rec)
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	b.Cleanup(func() {
		rd.Close()
		<-done
	})
}
