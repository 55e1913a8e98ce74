package packetgen

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"testing"
)

// TestChecksumOfAKnownHeader: the IPv4 header of RFC 1071's usual worked example.
func TestChecksumOfAKnownHeader(t *testing.T) {
	h, _ := hex.DecodeString("450000730000400040110000c0a80001c0a800c7")
	if got := checksum(0, h); got != 0xb861 {
		t.Fatalf("checksum %#04x, want 0xb861", got)
	}
}

func testSpec(k Kind) Spec {
	return Spec{Kind: k, Interface: "eth0",
		DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		Source: netip.MustParseAddr("10.91.1.2"), SourceNet: netip.MustParsePrefix("10.200.0.0/16"),
		Destinations: []netip.Addr{netip.MustParseAddr("10.91.2.11"), netip.MustParseAddr("10.91.2.12")}, DstPort: 80}
}

// TestFramesAreValid: every generated frame verifies (IPv4 and TCP checksums sum to zero), goes
// to the destinations in turn, and SYNs come from inside the source network with ports in range.
func TestFramesAreValid(t *testing.T) {
	for _, k := range []Kind{UDP, SYN} {
		g := newGenerator(testSpec(k))
		ports := map[uint16]bool{}
		for round := range 4 {
			g.fill()
			for i := range g.frames {
				f := g.frames[i][:]
				ip := f[14:34]
				if checksum(0, ip) != 0 {
					t.Fatalf("kind %d frame %d: IPv4 header checksum does not verify: % x", k, i, ip)
				}
				want := testSpec(k).Destinations[(round*batch+i)%2].As4()
				if [4]byte(ip[16:20]) != want {
					t.Fatalf("kind %d frame %d: destination %v, want %v", k, i, ip[16:20], want)
				}
				port := binary.BigEndian.Uint16(f[34:36])
				if port < 1024 {
					t.Fatalf("source port %d", port)
				}
				ports[port] = true
				switch k {
				case SYN:
					if ip[9] != 6 || f[47] != 0x02 || ip[12] != 10 || ip[13] != 200 {
						t.Fatalf("SYN frame %d: protocol %d, flags %#x, source %v", i, ip[9], f[47], ip[12:16])
					}
					if payload := f[34 : 14+binary.BigEndian.Uint16(ip[2:4])]; receiverTCPChecksum(ip, payload) != 0 {
						t.Fatalf("SYN frame %d: TCP checksum does not verify over the IP payload of %d bytes", i, len(payload))
					}
				case UDP:
					if ip[9] != 17 || [4]byte(ip[12:16]) != [4]byte{10, 91, 1, 2} || binary.BigEndian.Uint16(f[36:38]) != 80 {
						t.Fatalf("UDP frame %d: protocol %d, source %v, port %d", i, ip[9], ip[12:16], binary.BigEndian.Uint16(f[36:38]))
					}
				}
			}
		}
		if len(ports) < 4*batch/2 {
			t.Errorf("kind %d: %d distinct source ports in %d frames", k, len(ports), 4*batch)
		}
	}
}

func TestSpecCheck(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"no interface":         func(s *Spec) { s.Interface = "" },
		"short MAC":            func(s *Spec) { s.DstMAC = s.DstMAC[:4] },
		"no destination":       func(s *Spec) { s.Destinations = nil },
		"IPv6 destination":     func(s *Spec) { s.Destinations = []netip.Addr{netip.MustParseAddr("fd00::1")} },
		"SYN from a /4":        func(s *Spec) { s.Kind, s.SourceNet = SYN, netip.MustParsePrefix("10.0.0.0/4") },
		"UDP without a source": func(s *Spec) { s.Source = netip.Addr{} },
	} {
		s := testSpec(UDP)
		mutate(&s)
		if s.Check() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := testSpec(SYN).Check(); err != nil {
		t.Error(err)
	}
}

// receiverTCPChecksum sums what a receiver sums: the pseudo-header (addresses, protocol, the IP
// payload's length) and the payload; 0 means the segment verifies.
func receiverTCPChecksum(ip, payload []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	add(ip[12:20])
	add([]byte{0, ip[9], byte(len(payload) >> 8), byte(len(payload))})
	add(payload)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
