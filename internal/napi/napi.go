// Package napi lists a network device's NAPI instances and the kernel threads that poll them
// when the device is in threaded NAPI mode, by the netdev generic netlink family, in the calling
// thread's network namespace.
package napi

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/nlattr"
)

// The netdev family's napi-get command and its attributes (include/uapi/linux/netdev.h).
const (
	familyName    = "netdev"
	cmdNAPIGet    = 11
	attrNAPIIfidx = 1
	attrNAPIID    = 2
	attrNAPIPID   = 4
	familyVersion = 1
)

// Instance is one NAPI instance of a device: its id and, in threaded mode, the pid of the kernel
// thread that polls it (0 when softirq polls it).
type Instance struct {
	ID  uint32
	PID int
}

// Of lists dev's NAPI instances. A device without NAPI (a veth with neither XDP nor GRO) has none.
func Of(dev string) ([]Instance, error) {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return nil, err
	}
	family, err := netlink.GenlFamilyGet(familyName)
	if err != nil {
		return nil, fmt.Errorf("generic netlink family %s: %w", familyName, err)
	}
	req := nl.NewNetlinkRequest(int(family.ID), unix.NLM_F_DUMP)
	req.AddData(genlHeader{cmdNAPIGet, familyVersion})
	req.AddData(nl.NewRtAttr(attrNAPIIfidx, nl.Uint32Attr(uint32(link.Attrs().Index))))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return nil, fmt.Errorf("napi-get of %s: %w", dev, err)
	}
	var out []Instance
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nlattr.Parse(m[nl.SizeofGenlmsg:])
		if err != nil {
			return nil, fmt.Errorf("napi-get of %s: %w", dev, err)
		}
		var in Instance
		for _, a := range attrs {
			if len(a.Value) < 4 {
				continue
			}
			switch a.Attr.Type {
			case attrNAPIID:
				in.ID = binary.NativeEndian.Uint32(a.Value)
			case attrNAPIPID:
				in.PID = int(binary.NativeEndian.Uint32(a.Value))
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// Place binds the polling threads of instances to cpu and runs them SCHED_FIFO at priority
// (1-99), so that they preempt ordinary threads on it as a softirq poll would. An instance
// without a thread is an error: its device is not in threaded mode.
func Place(instances []Instance, cpu, priority int) error {
	var set unix.CPUSet
	set.Set(cpu)
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(priority)}
	for _, in := range instances {
		if in.PID == 0 {
			return fmt.Errorf("NAPI %d has no polling thread (threaded mode off)", in.ID)
		}
		if err := unix.SchedSetaffinity(in.PID, &set); err != nil {
			return fmt.Errorf("pinning NAPI %d's thread %d to CPU %d: %w", in.ID, in.PID, cpu, err)
		}
		if err := unix.SchedSetAttr(in.PID, &attr, 0); err != nil {
			return fmt.Errorf("SCHED_FIFO %d for NAPI %d's thread %d: %w", priority, in.ID, in.PID, err)
		}
	}
	return nil
}

// genlHeader is a generic netlink message header with its reserved bytes zero, which the netdev
// family checks (nl.Genlmsg serializes 4 bytes from a 2-byte struct).
type genlHeader struct{ command, version uint8 }

func (h genlHeader) Len() int          { return nl.SizeofGenlmsg }
func (h genlHeader) Serialize() []byte { return []byte{h.command, h.version, 0, 0} }
