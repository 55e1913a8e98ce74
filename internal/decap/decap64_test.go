package decap

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// TestDecapFixturesMixedFamilies runs tunnel packets whose inner family is not the outer one:
// IPv6 in IPv4 (protocol 41, "6in4"; GUE over IPv4 carrying IPv6) and IPv4 in IPv6 (next header
// 4). The good ones leave as the inner packet behind an EtherType of its family; the malformed
// ones (the inner family not the one announced, truncated, not for this host) are dropped and
// counted, transit passes untouched.
func TestDecapFixturesMixedFamilies(t *testing.T) {
	objs := loadTest(t)
	in4, in6 := inner(cli4, vip4), inner(cli6, vip6)
	long6 := bytes.Clone(in6)
	binary.BigEndian.PutUint16(long6[4:], uint16(len(in6))) // the payload length claims 40 bytes more
	runCases(t, objs, []decapCase{
		{"6in4 ipip: IPv6 in IPv4 protocol 41", tunnelAs(lb4, host4, layers.IPProtocolIPv6, 0, in6), tcOK, ether(cli6, in6), Counts{IPIP: 1}},
		{"6in4 ipip: to a VIP of the host", tunnelAs(lb4, vip4, layers.IPProtocolIPv6, 0, in6), tcOK, ether(cli6, in6), Counts{IPIP: 1}},
		{"4in6 ipip: IPv4 in IPv6 next header 4", tunnelAs(lb6, host6, layers.IPProtocolIPv4, 0, in4), tcOK, ether(cli4, in4), Counts{IPIP: 1}},
		{"6in4 gue: variant 1 over IPv4 carrying IPv6", tunnel(lb4, host4, testGUEPort, in6), tcOK, ether(cli6, in6), Counts{GUE: 1}},
		{"6in4 gue: variant 0, proto 41", tunnel(lb4, host4, testGUEPort, append([]byte{0, 41, 0, 0}, in6...)), tcOK, ether(cli6, in6), Counts{GUE: 1}},
		{"4in6 gue: variant 1 over IPv6 carrying IPv4", tunnel(lb6, host6, testGUEPort, in4), tcOK, ether(cli4, in4), Counts{GUE: 1}},
		{"6in4 to another host passes untouched (transit)", tunnelAs(lb4, other4, layers.IPProtocolIPv6, 0, in6), tcOK, nil, Counts{}},
		{"6in4: protocol 41 carrying IPv4 is dropped", tunnelAs(lb4, host4, layers.IPProtocolIPv6, 0, in4), tcShot, nil, Counts{Malformed: 1}},
		{"4in6: next header 4 carrying IPv6 is dropped", tunnelAs(lb6, host6, layers.IPProtocolIPv4, 0, in6), tcShot, nil, Counts{Malformed: 1}},
		{"6in4: a truncated IPv6 header is dropped", tunnelAs(lb4, host4, layers.IPProtocolIPv6, 0, in6[:30]), tcShot, nil, Counts{Malformed: 1}},
		{"6in4: an IPv6 packet longer than the outer is dropped", tunnelAs(lb4, host4, layers.IPProtocolIPv6, 0, long6), tcShot, nil, Counts{Malformed: 1}},
		{"6in4: an inner destination not the host's is dropped", tunnelAs(lb4, host4, layers.IPProtocolIPv6, 0, inner(cli6, other6)), tcShot, nil, Counts{Foreign: 1}},
		{"6in4 gue: an inner destination not the host's is dropped", tunnel(lb4, host4, testGUEPort, inner(cli6, other6)), tcShot, nil, Counts{Foreign: 1}},
		{"6in4 gue: variant 0, proto 41 carrying IPv4 is dropped", tunnel(lb4, host4, testGUEPort, append([]byte{0, 41, 0, 0}, in4...)), tcShot, nil, Counts{Malformed: 1}},
		{"gue: variant 1 with version nibble 5 is dropped", tunnel(lb4, host4, testGUEPort, append([]byte{0x50}, in6[1:]...)), tcShot, nil, Counts{Malformed: 1}},
	})
}
