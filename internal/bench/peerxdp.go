package bench

// XDP on the lab's veth. A frame an XDP program redirects into a veth is dropped unless the
// veth's other end runs XDP too (or has GRO on): docs/ebpf-datapath.md. With --switch stack the
// lab's switch bridges in its stack, and a candidate that redirects at XDP gets a pass program
// on the ends its frames land on. With --switch xdp frames stay in XDP for every candidate: the
// switch's ports forward each frame straight to the port owning its destination MAC (devmap
// redirect), and the ends the switch and the balancer hand frames to run XDP.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/ethtool"
	"github.com/sluicelb/sluice/internal/lab"
)

// Switch is how the lab's switch, and the hosts behind it, take frames (--switch).
type Switch string

const (
	// SwitchStack bridges in the switch's stack (the default).
	SwitchStack Switch = "stack"
	// SwitchXDP forwards by destination MAC at the switch's XDP, with XDP on the receiving ends.
	SwitchXDP Switch = "xdp"
)

// SwitchModes are the values of --switch.
var SwitchModes = []Switch{SwitchStack, SwitchXDP}

// checkSwitch reports a --switch value that is not one of SwitchModes; empty means SwitchStack.
func checkSwitch(s Switch) error {
	if s == "" {
		return nil
	}
	return checkOneOf("switch", "mode", []string{string(s)}, SwitchModes)
}

// orStack is s, or SwitchStack when s is empty.
func (s Switch) orStack() Switch { return cmp.Or(s, SwitchStack) }

// XDP actions.
const (
	xdpDrop = 1
	xdpPass = 2
)

// labEnd is one interface in one of the lab's namespaces.
type labEnd struct{ ns, dev string }

// redirectEnds are where an XDP candidate's frames land with --switch stack: the switch's end of
// the balancer's backend veth (forward) and the client's end of its client veth (nat replies).
// They are also the senders into the balancer's XDP, so they send complete checksums and queue
// (setPortQueues) meanwhile.
func redirectEnds(e *Env) []labEnd {
	return []labEnd{{e.Lab.SwitchNS(), "lb"}, clientEnd(e)}
}

// clientEnd is the client's end of its veth to the balancer. The balancer's XDP hands it nat
// replies frame by frame, the way a wire does, so meanwhile it merges them (GRO) as a host's NIC
// does; the stack path hands it whole GSO packets.
func clientEnd(e *Env) labEnd { return labEnd{e.Lab.ClientNS(), "eth0"} }

// setCandidateXDP attaches (on) or detaches a pass program on the redirectEnds, for a candidate
// that redirects at XDP. With --switch xdp they run XDP for the whole run already.
func setCandidateXDP(e *Env, on bool) error {
	if e.xdpSwitch {
		return nil
	}
	undo := func() error {
		return errors.Join(detachXDP(e, redirectEnds(e)...), setTxChecksums(e, true, redirectEnds(e)...),
			setPortQueues(e, false, redirectEnds(e)...), setOffload(e, clientEnd(e), unix.ETHTOOL_SGRO, false))
	}
	if !on {
		return undo()
	}
	pass, err := passProgram()
	if err != nil {
		return err
	}
	defer pass.Close() // the attachments hold it
	if err := errors.Join(setTxChecksums(e, false, redirectEnds(e)...), setPortQueues(e, true, redirectEnds(e)...),
		setOffload(e, clientEnd(e), unix.ETHTOOL_SGRO, true)); err != nil {
		return errors.Join(err, undo())
	}
	for _, end := range redirectEnds(e) {
		if err := attachXDP(e, end, pass); err != nil {
			return errors.Join(err, undo())
		}
	}
	return nil
}

// switchPort is a port of the lab's switch and the interface at its other end.
type switchPort struct{ port, peer labEnd }

// switchPorts are the switch's ports in a single-balancer lab.
func switchPorts(e *Env) []switchPort {
	sw := e.Lab.SwitchNS()
	out := []switchPort{
		{labEnd{sw, "lb"}, labEnd{e.Lab.BalancerNS(), "eth1"}},
		{labEnd{sw, "client"}, labEnd{e.Lab.ClientNS(), "byp0"}},
	}
	for i := 1; i <= e.Lab.Backends; i++ {
		out = append(out, switchPort{labEnd{sw, lab.BackendName(i)}, labEnd{e.Lab.BackendNS(i), "eth0"}})
	}
	return out
}

// labEnds are both ends of every veth of a single-balancer lab.
func labEnds(e *Env) []labEnd {
	out := []labEnd{{e.Lab.ClientNS(), "eth0"}, {e.Lab.BalancerNS(), "eth0"}}
	for _, p := range switchPorts(e) {
		out = append(out, p.port, p.peer)
	}
	return out
}

// startSwitch makes frames stay in XDP for the run with SwitchXDP (and does nothing with
// SwitchStack): the switch's ports forward by MAC, the client's ends and the backends' eth0 run a
// pass program (with dropPort, a program dropping the bench's port instead), and the balancer's
// backend veth, where Sluice may attach its own XDP, gets GRO, which lets a veth take redirected
// frames too. Every veth sends complete checksums (setTxChecksums). It returns what undoes it
// all; on failure it undoes itself.
func startSwitch(e *Env, mode Switch, dropPort bool) (stop func() error, err error) {
	if mode != SwitchXDP {
		return func() error { return nil }, nil
	}
	e.Progress.Step("switch: XDP on the switch's ports and the ends they forward to")
	var attached []labEnd
	gro := labEnd{e.Lab.BalancerNS(), "eth1"}
	undo := func() error {
		e.xdpSwitch = false
		return errors.Join(detachXDP(e, attached...), setOffload(e, gro, unix.ETHTOOL_SGRO, false),
			setTxChecksums(e, true, labEnds(e)...), setPortQueues(e, false, labEnds(e)...))
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, undo())
		}
	}()
	pass, err := passProgram()
	if err != nil {
		return nil, err
	}
	defer pass.Close() // the attachments hold it
	backend := pass
	if dropPort {
		if backend, err = dropPortProgram(vipPort); err != nil {
			return nil, err
		}
		defer backend.Close()
	}
	fwd, err := forwarder(e)
	if err != nil {
		return nil, err
	}
	defer fwd.Close()
	attach := func(end labEnd, prog *ebpf.Program) error {
		attached = append(attached, end)
		return attachXDP(e, end, prog)
	}
	for _, p := range switchPorts(e) {
		if err := attach(p.port, fwd); err != nil {
			return nil, err
		}
	}
	for _, end := range []labEnd{{e.Lab.ClientNS(), "eth0"}, {e.Lab.ClientNS(), "byp0"}} {
		if err := attach(end, pass); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= e.Lab.Backends; i++ {
		if err := attach(labEnd{e.Lab.BackendNS(i), "eth0"}, backend); err != nil {
			return nil, err
		}
	}
	if err := errors.Join(setOffload(e, gro, unix.ETHTOOL_SGRO, true),
		setTxChecksums(e, false, labEnds(e)...), setPortQueues(e, true, labEnds(e)...)); err != nil {
		return nil, err
	}
	e.xdpSwitch = true
	return undo, nil
}

func newXDP(name string, insns asm.Instructions) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.XDP, License: "GPL", Instructions: insns})
	if err != nil {
		return nil, fmt.Errorf("XDP program %s: %w", name, err)
	}
	return prog, nil
}

// passProgram passes every frame to the stack.
func passProgram() (*ebpf.Program, error) {
	return newXDP("lab_pass", asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()})
}

// dropPortProgram drops IPv4 TCP and UDP to port (without IP options, as the bench sends them)
// and passes everything else. A veth counts what its XDP program drops as received.
func dropPortProgram(port uint16) (*ebpf.Program, error) {
	be16 := func(v uint16) int32 { return int32(binary.LittleEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))) }
	return newXDP("lab_drop_port", asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+20+4), // Ethernet, IPv4, source and destination port
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, be16(unix.ETH_P_IP), "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte),
		asm.JNE.Imm(asm.R5, 0x45, "pass"), // version 4, no options
		asm.LoadMem(asm.R5, asm.R2, 14+9, asm.Byte),
		asm.JEq.Imm(asm.R5, unix.IPPROTO_TCP, "port"),
		asm.JNE.Imm(asm.R5, unix.IPPROTO_UDP, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+20+2, asm.Half).WithSymbol("port"),
		asm.JNE.Imm(asm.R5, be16(port), "pass"),
		asm.Mov.Imm(asm.R0, xdpDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	})
}

// forwarder is the switch's port program: a frame whose destination MAC is a port's peer goes
// straight to that port (devmap redirect); anything else (broadcast, multicast, unknown MACs)
// passes to the bridge.
func forwarder(e *Env) (*ebpf.Program, error) {
	macs, err := ebpf.NewMap(&ebpf.MapSpec{Name: "lab_macs", Type: ebpf.Hash, KeySize: 8, ValueSize: 4, MaxEntries: 64})
	if err != nil {
		return nil, fmt.Errorf("XDP switch MAC table: %w", err)
	}
	defer macs.Close() // the program holds it
	ports, err := ebpf.NewMap(&ebpf.MapSpec{Name: "lab_ports", Type: ebpf.DevMapHash, KeySize: 4, ValueSize: 4, MaxEntries: 64})
	if err != nil {
		return nil, fmt.Errorf("XDP switch ports: %w", err)
	}
	defer ports.Close()
	type entry struct {
		mac     [8]byte
		ifindex uint32
	}
	var entries []entry
	for _, p := range switchPorts(e) {
		mac, err := macOf(e, p.peer.ns, p.peer.dev)
		if err != nil {
			return nil, err
		}
		hw, err := net.ParseMAC(mac)
		if err != nil {
			return nil, err
		}
		ifindex, err := ifindexOf(p.port)
		if err != nil {
			return nil, err
		}
		var key [8]byte
		copy(key[:], hw)
		entries = append(entries, entry{key, ifindex})
	}
	// A devmap takes ifindexes of the namespace that updates it.
	if err := e.Lab.Do(e.Lab.SwitchNS(), func() error {
		for _, en := range entries {
			if err := errors.Join(macs.Put(en.mac, en.ifindex), ports.Put(en.ifindex, en.ifindex)); err != nil {
				return fmt.Errorf("XDP switch port %d: %w", en.ifindex, err)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return newXDP("lab_switch", asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 6),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		// key: the destination MAC in 8 bytes, zero-padded
		asm.LoadMem(asm.R5, asm.R2, 0, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R5, asm.Word),
		asm.LoadMem(asm.R5, asm.R2, 4, asm.Half),
		asm.StoreMem(asm.RFP, -4, asm.R5, asm.Half),
		asm.StoreImm(asm.RFP, -2, 0, asm.Half),
		asm.LoadMapPtr(asm.R1, macs.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R2, asm.R0, 0, asm.Word), // the port's ifindex
		asm.LoadMapPtr(asm.R1, ports.FD()),
		asm.Mov.Imm(asm.R3, xdpPass), // when the port is gone
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	})
}

func ifindexOf(end labEnd) (uint32, error) {
	var ifindex uint32
	err := lab.WithHandle(end.ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(end.dev)
		if err == nil {
			ifindex = uint32(link.Attrs().Index)
		}
		return err
	})
	return ifindex, err
}

// attachXDP attaches prog to end in native mode (by netlink: the attachment outlives prog's fd).
func attachXDP(e *Env, end labEnd, prog *ebpf.Program) error {
	err := e.Lab.Do(end.ns, func() error {
		link, err := netlink.LinkByName(end.dev)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(link, prog.FD(), unix.XDP_FLAGS_DRV_MODE)
	})
	if err != nil {
		return fmt.Errorf("XDP on %s in %s: %w", end.dev, end.ns, err)
	}
	return nil
}

// detachXDP removes the XDP program of every end; an end already gone has none.
func detachXDP(e *Env, ends ...labEnd) error {
	var errs []error
	for _, end := range ends {
		err := e.Lab.Do(end.ns, func() error {
			link, err := netlink.LinkByName(end.dev)
			if err != nil {
				return nil //nolint:nilerr // gone, and its program with it
			}
			return netlink.LinkSetXdpFdWithFlags(link, -1, unix.XDP_FLAGS_DRV_MODE)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("removing XDP from %s in %s: %w", end.dev, end.ns, err))
		}
	}
	return errors.Join(errs...)
}

// setPortQueues gives every end a pfifo queue as long as its txqueuelen (on), or takes it away
// again (off: a veth's default, noqueue). A veth whose other end runs XDP or GRO takes frames
// through a ring of 256; a noqueue sender drops whatever finds the ring full (a 64 KiB response
// the switch segments for an XDP receiver is 45 frames at once), while a queued sender's veth
// stops the queue until the ring drains, as a switch port buffers a burst.
func setPortQueues(e *Env, on bool, ends ...labEnd) error {
	var errs []error
	for _, end := range ends {
		err := lab.WithHandle(end.ns, func(h *netlink.Handle) error {
			link, err := h.LinkByName(end.dev)
			if err != nil {
				if on {
					return err
				}
				return nil // gone, and its queue with it
			}
			q := &netlink.GenericQdisc{QdiscType: "pfifo", QdiscAttrs: netlink.QdiscAttrs{
				LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}}
			if on {
				return h.QdiscReplace(q)
			}
			if err := h.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
				return err
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("queue on %s in %s: %w", end.dev, end.ns, err))
		}
	}
	return errors.Join(errs...)
}

// setOffload turns an offload of end on or off by the ethtool ioctl cmd (ETHTOOL_SGRO, ...).
func setOffload(e *Env, end labEnd, cmd uint32, on bool) error {
	if err := e.Lab.Do(end.ns, func() error { return ethtool.Set(end.dev, cmd, on) }); err != nil {
		return fmt.Errorf("in %s: %w", end.ns, err)
	}
	return nil
}

// setTxChecksums turns transmit checksum offload of every end on (a veth's default) or off: a
// frame an XDP program redirects loses its "checksum to complete" mark, so whatever sends into
// an XDP program that may redirect must send complete checksums.
func setTxChecksums(e *Env, on bool, ends ...labEnd) error {
	var errs []error
	for _, end := range ends {
		errs = append(errs, setOffload(e, end, unix.ETHTOOL_STXCSUM, on))
	}
	return errors.Join(errs...)
}
