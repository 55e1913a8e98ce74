package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
)

// Which runs the program attached here on a synthetic packet from src to the service at vip (a
// TCP ACK, so that a tracked flow is looked up, never rebalanced as a SYN would be) and reports
// the backend it picks, Katran's simulator idea on the real maps. It runs a copy of the program
// that counts nothing (see whichProgram), and a flow the program did not track before is
// forgotten again, so nothing the program keeps changes. A new flow the program refuses for the
// service's access lists is reported as dropped, naming the list (Choice.Dropped).
func (d *Datapath) Which(protocol string, vip, src netip.AddrPort) (datapath.Choice, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	proto, ok := wireProtocols[config.Protocol(protocol)]
	if !ok {
		return datapath.Choice{}, fmt.Errorf("protocol %q: want tcp or udp", protocol)
	}
	if vip.Addr().Is4() != src.Addr().Is4() {
		return datapath.Choice{}, fmt.Errorf("%s and %s are not of one IP version", vip, src)
	}
	m, err := d.pinnedMaps()
	if err != nil || m == nil {
		return datapath.Choice{}, errors.Join(errors.New("no ebpf datapath is programmed here"), err)
	}
	var svc sluiceService
	if err := m.Vips.Lookup(vipKeyOf(vip.Addr(), vip.Port(), proto), &svc); err != nil {
		return datapath.Choice{}, fmt.Errorf("%s/%s is not a service here", vip, protocol)
	}
	prog, err := d.whichProgram(m)
	if err != nil {
		return datapath.Choice{}, err
	}
	defer prog.Close()
	key := flowKeyOf(src, vip, proto)
	var flow sluiceFlow
	tracked := m.Flows.Lookup(key, &flow) == nil
	packet, err := syntheticPacket(proto, src, vip)
	if err != nil {
		return datapath.Choice{}, err
	}
	if _, err := prog.Run(&ebpf.RunOptions{Data: packet, DataOut: make([]byte, len(packet)+256)}); err != nil {
		return datapath.Choice{}, fmt.Errorf("running the program: %w", err)
	}
	if err := m.Flows.Lookup(key, &flow); err != nil {
		return refusedChoice(m, svc, src, vip)
	}
	c, err := describeChoice(m, svc, flow, vip)
	c.Tracked = tracked
	if err == nil && !tracked {
		err = forget(m, key, flow, c, src)
	}
	return c, err
}

// whichProgram loads this version's copy of the program the pinned links run (tc or XDP) over
// the pinned maps, with count_nothing set: it decides as the attached one does and counts the
// synthetic packet nowhere.
func (d *Datapath) whichProgram(m *kernelMaps) (*ebpf.Program, error) {
	attached, err := d.attachedProgram()
	if err != nil {
		return nil, err
	}
	name := attachPrograms[AttachTC]
	if attached.Type() == ebpf.XDP {
		name = attachPrograms[AttachXDP]
	}
	attached.Close()
	spec, err := collectionSpec(name, MapSizes{Flows: m.Flows.MaxEntries(), MaglevSlots: m.Maglev.MaxEntries()})
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[sluiceVarCountNothing].Set(uint8(1)); err != nil {
		return nil, err
	}
	pinned := m.byName()
	for pin, x := range pinned {
		adoptLRUFlags(spec.Maps[pin], x)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: pinned})
	if err != nil {
		return nil, fmt.Errorf("loading the program's copy for which: %w", err)
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

// attachedProgram opens the program one of the pinned links runs.
func (d *Datapath) attachedProgram() (*ebpf.Program, error) {
	pins, _ := filepath.Glob(filepath.Join(d.opts.PinPath, linksDir, "*"))
	for _, pin := range pins {
		l, err := link.LoadPinnedLink(pin, nil)
		if err != nil {
			continue
		}
		info, err := l.Info()
		l.Close()
		if err == nil {
			return ebpf.NewProgramFromID(info.Program)
		}
	}
	return nil, fmt.Errorf("the ebpf datapath is attached to no interface (no link pinned in %s)", filepath.Join(d.opts.PinPath, linksDir))
}

// syntheticPacket is an Ethernet frame holding a TCP ACK or a UDP datagram from src to dst.
func syntheticPacket(proto uint8, src, dst netip.AddrPort) ([]byte, error) {
	// To the address of the loopback device, which the test run receives the frame on: a frame
	// for another host's MAC is the stack's, and the program leaves it alone.
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{0, 0, 0, 0, 0, 0}}
	var ip gopacket.NetworkLayer
	var l3 gopacket.SerializableLayer
	if src.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		v4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocol(proto), SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		ip, l3 = v4, v4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocol(proto), SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		ip, l3 = v6, v6
	}
	var l4 interface {
		gopacket.SerializableLayer
		SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
	}
	if proto == wireProtocols[config.ProtocolTCP] {
		l4 = &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), ACK: true, Seq: 1, Ack: 1, Window: 512}
	} else {
		l4 = &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	}
	if err := l4.SetNetworkLayerForChecksum(ip); err != nil {
		return nil, err
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, l3, l4)
	return buf.Bytes(), err
}

// serviceChoice is a Choice naming the service and its mode, no backend yet.
func serviceChoice(m *kernelMaps, svc sluiceService) datapath.Choice {
	c := datapath.Choice{Mode: wireName(wireModes, svc.Mode)}
	var rec serviceRecord
	if err := m.ServiceMeta.Lookup(svc.Id, &rec); err == nil {
		c.Service = rec.name()
	}
	return c
}

// refusedChoice tells why the program tracked no flow from src: the service's access lists drop
// it (Choice.Dropped), or else it has no backend for new flows (an error).
func refusedChoice(m *kernelMaps, svc sluiceService, src, vip netip.AddrPort) (datapath.Choice, error) {
	c := serviceChoice(m, svc)
	dropped, err := sourceRefusal(m, svc, src.Addr())
	if err != nil || dropped != "" {
		c.Dropped = dropped
		return c, err
	}
	return datapath.Choice{}, fmt.Errorf("the program tracked no flow for %s -> %s: the service has no backend for new flows", src, vip)
}

// sourceRefusal tells why the service's access lists refuse client a new flow, as the program's
// source_refused decides (datapath.SourceRefusal): "" when they do not.
func sourceRefusal(m *kernelMaps, svc sluiceService, client netip.Addr) (string, error) {
	if svc.Flags&sluiceServiceFlagsSERVICE_OPTS == 0 {
		return "", nil
	}
	var opts sluiceServiceSettings
	if err := m.ServiceOpts.Lookup(svc.Id, &opts); err != nil {
		return "", fmt.Errorf("the settings of service %d: %w", svc.Id, err)
	}
	var denied, allowedBy netip.Prefix
	var err error
	if opts.Sources&sluiceSourceListsSOURCES_DENY != 0 {
		if denied, err = shortestMatch(m.SourceDeny, svc.Id, client); err != nil {
			return "", err
		}
	}
	allowList := opts.Sources&sluiceSourceListsSOURCES_ALLOW != 0
	if allowList {
		if allowedBy, err = shortestMatch(m.SourceAllow, svc.Id, client); err != nil {
			return "", err
		}
	}
	return datapath.SourceRefusal(denied, !allowList || allowedBy.IsValid()), nil
}

// shortestMatch is the shortest prefix of service id's access list (an LPM trie) that holds
// addr, or none: a lookup at length n matches when a prefix of at most n bits holds addr, so the
// first length that matches is that prefix's.
func shortestMatch(list *ebpf.Map, id uint32, addr netip.Addr) (netip.Prefix, error) {
	var listed uint8
	for bits := range addr.BitLen() + 1 {
		p := netip.PrefixFrom(addr, bits).Masked()
		err := list.Lookup(sourceKey(id, p), &listed)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return netip.Prefix{}, fmt.Errorf("looking %s up in an access list: %w", addr, err)
		}
	}
	return netip.Prefix{}, nil
}

// describeChoice names the service and backend of a flow.
func describeChoice(m *kernelMaps, svc sluiceService, flow sluiceFlow, vip netip.AddrPort) (datapath.Choice, error) {
	c := serviceChoice(m, svc)
	c.NATPort = wirePort(flow.NatPort)
	var b sluiceBackend
	if err := m.Backends.Lookup(flow.BackendId, &b); err != nil {
		return c, fmt.Errorf("backend %d of the flow: %w", flow.BackendId, err)
	}
	port := wirePort(b.Port)
	if port == 0 {
		port = vip.Port()
	}
	c.Backend = netip.AddrPortFrom(addrFromWire(b.Addr, b.Family), port)
	return c, nil
}

// forget deletes the synthetic flow and the reply entry it claimed.
func forget(m *kernelMaps, key sluiceFlowKey, flow sluiceFlow, c datapath.Choice, src netip.AddrPort) error {
	err := m.Flows.Delete(key)
	var reply sluiceFlowKey
	switch c.Mode {
	case config.ModeNAT:
		reply = flowKeyOf(c.Backend, src, key.Proto)
	case config.ModeFullNAT:
		var g sluiceGlobals
		if gerr := m.Config.Lookup(uint32(0), &g); gerr != nil {
			return errors.Join(err, gerr)
		}
		snat := netip.AddrFrom16(g.Snat6)
		if src.Addr().Is4() {
			snat = netip.AddrFrom4(g.Snat4)
		}
		reply = flowKeyOf(c.Backend, netip.AddrPortFrom(snat, c.NATPort), key.Proto)
	default: // dsr: no reply entry
		return ignoreMissing(err)
	}
	return errors.Join(ignoreMissing(err), ignoreMissing(m.Replies.Delete(reply)))
}

func ignoreMissing(err error) error {
	if errors.Is(err, ebpf.ErrKeyNotExist) || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
