package ebpf

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
)

// The encodings the BPF contract (bpf/structs.h, bpf/constants.h) uses for addresses, ports and
// the plan's values. Its enums and flags are generated (sluiceMode, sluiceBackendFlags, ...).

// wireProtocols are the IPPROTO_* numbers of the plan's protocols.
var wireProtocols = map[config.Protocol]uint8{config.ProtocolTCP: unix.IPPROTO_TCP, config.ProtocolUDP: unix.IPPROTO_UDP}

// wireModes are the plan's modes as enum mode.
var wireModes = map[config.Mode]sluiceMode{
	config.ModeNAT: sluiceModeMODE_NAT, config.ModeFullNAT: sluiceModeMODE_FULLNAT, config.ModeDSR: sluiceModeMODE_DSR,
	config.ModeTunnel: sluiceModeMODE_TUNNEL,
}

// wireFallbacks are the plan's fallbacks as enum fallback. Sorry servers are backends of the
// plan, so a service whose sorry servers are down too drops.
var wireFallbacks = map[config.Fallback]sluiceFallback{
	config.FallbackDrop: sluiceFallbackFALLBACK_DROP, config.FallbackReject: sluiceFallbackFALLBACK_REJECT,
	config.FallbackSorry: sluiceFallbackFALLBACK_DROP,
}

// wireAddr lays an address out as the contract does: 16 bytes, IPv4 in the first 4, and its
// AF_INET or AF_INET6 family.
func wireAddr(a netip.Addr) (addr [16]byte, family uint8) {
	if a.Is4() {
		v4 := a.As4()
		copy(addr[:], v4[:])
		return addr, unix.AF_INET
	}
	return a.As16(), unix.AF_INET6
}

// addrFromWire reads an address laid out by wireAddr.
func addrFromWire(addr [16]byte, family uint8) netip.Addr {
	if family == unix.AF_INET {
		return netip.AddrFrom4([4]byte(addr[:4]))
	}
	return netip.AddrFrom16(addr)
}

// wirePort turns a port into network byte order as a __be16 field holds it, and back.
func wirePort(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

// wireName finds the name of a value of wireProtocols or wireModes ("" if unknown).
func wireName[T ~string, W comparable](table map[T]W, v W) T {
	for name, w := range table {
		if w == v {
			return name
		}
	}
	return ""
}
