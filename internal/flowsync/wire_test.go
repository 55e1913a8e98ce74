package flowsync

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
)

var testSecret = []byte("a secret of the sync link, 32 by")

// testFlows returns n flows of distinct clients: IPv4 nat flows, and IPv6 fullnat ones when v6.
func testFlows(n int, v6 bool) []datapath.ReplicatedFlow {
	flows := make([]datapath.ReplicatedFlow, n)
	for i := range flows {
		f := datapath.ReplicatedFlow{
			Protocol: config.ProtocolTCP,
			Client:   netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(1024+i)),
			Listener: netip.MustParseAddrPort("192.0.2.10:80"),
			Backend:  netip.MustParseAddrPort("10.9.0.2:8080"),
			Closing:  i%3 == 0,
			Idle:     time.Duration(i) * time.Millisecond,
		}
		if v6 {
			f.Protocol = config.ProtocolUDP
			f.Client = netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}), uint16(1024+i))
			f.Listener = netip.MustParseAddrPort("[2001:db8::10]:53")
			f.Backend = netip.MustParseAddrPort("[2001:db8:9::2]:0")
			f.NATSource = netip.AddrPortFrom(netip.MustParseAddr("2001:db8:9::1"), uint16(20000+i))
		}
		flows[i] = f
	}
	return flows
}

// seal encodes flows (all must fit) into one datagram of kind.
func seal(t testing.TB, secret []byte, kind msgType, ref resyncRef, node, seq uint64, at time.Time, flows []datapath.ReplicatedFlow) []byte {
	t.Helper()
	enc := newEncoder(maxDatagram)
	enc.reset(kind, ref)
	for i := range flows {
		if ok, err := enc.add(&flows[i]); !ok || err != nil {
			t.Fatalf("flow %d does not fit: %v", i, err)
		}
	}
	return bytes.Clone(enc.seal(newMAC(secret), node, seq, at))
}

func TestWireRoundTrip(t *testing.T) {
	now := time.Unix(1700000000, 123456789)
	flows := append(testFlows(3, false), testFlows(3, true)...)
	dec := newDecoder(testSecret)
	for _, kind := range []msgType{msgUpdates, msgResyncData, msgRefresh} {
		b := seal(t, testSecret, kind, resyncRef{7, 9}, 42, 5, now, flows)
		if want := headerSize + 3*record4Size + 3*record6Size + macSize; kind == msgUpdates && len(b) != want {
			t.Errorf("datagram of %d bytes, want %d", len(b), want)
		}
		m, reason := dec.open(b)
		if reason != "" {
			t.Fatalf("type %d: dropped: %s", kind, reason)
		}
		if m.kind != kind || m.node != 42 || m.seq != 5 || m.time != now.UnixNano() {
			t.Errorf("type %d: header %+v", kind, m)
		}
		if kind == msgResyncData && m.ref != (resyncRef{7, 9}) {
			t.Errorf("ref %+v, want {7 9}", m.ref)
		}
		if !reflect.DeepEqual(m.flows, flows) {
			t.Errorf("type %d: flows\n%+v\nwant\n%+v", kind, m.flows, flows)
		}
	}
	enc := newEncoder(DefaultMTU)
	enc.reset(msgResyncEnd, resyncRef{7, 9})
	enc.setTotal(1 << 40)
	m, reason := dec.open(enc.seal(newMAC(testSecret), 42, 6, now))
	if reason != "" || m.kind != msgResyncEnd || m.total != 1<<40 || m.ref != (resyncRef{7, 9}) {
		t.Errorf("resync-end: %+v %q", m, reason)
	}
}

func TestWireRecordsPerDatagram(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		enc := newEncoder(DefaultMTU)
		enc.reset(msgUpdates, resyncRef{})
		flows := testFlows(100, v6)
		n := 0
		for i := range flows {
			ok, err := enc.add(&flows[i])
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			n++
		}
		size, want := record4Size, 41
		if v6 {
			size, want = record6Size, 16
		}
		if n != want || len(enc.buf)+macSize > DefaultMTU || len(enc.buf)+size+macSize <= DefaultMTU {
			t.Errorf("v6 %v: %d records in %d bytes, want %d filling %d", v6, n, len(enc.buf)+macSize, want, DefaultMTU)
		}
	}
}

func TestWireUnencodable(t *testing.T) {
	good := testFlows(1, false)[0]
	for name, change := range map[string]func(f *datapath.ReplicatedFlow){
		"protocol":         func(f *datapath.ReplicatedFlow) { f.Protocol = "sctp" },
		"no client":        func(f *datapath.ReplicatedFlow) { f.Client = netip.AddrPort{} },
		"listener family":  func(f *datapath.ReplicatedFlow) { f.Listener = netip.MustParseAddrPort("[2001:db8::1]:80") },
		"unspecified":      func(f *datapath.ReplicatedFlow) { f.Listener = netip.MustParseAddrPort("0.0.0.0:80") },
		"nat port only":    func(f *datapath.ReplicatedFlow) { f.NATSource = netip.AddrPortFrom(netip.Addr{}, 5) },
		"nat other family": func(f *datapath.ReplicatedFlow) { f.NATSource = netip.MustParseAddrPort("[2001:db8::1]:80") },
	} {
		f := good
		change(&f)
		enc := newEncoder(DefaultMTU)
		enc.reset(msgUpdates, resyncRef{})
		if _, err := enc.add(&f); !errors.Is(err, errUnencodable) {
			t.Errorf("%s: %v, want errUnencodable", name, err)
		}
	}
	// An IPv4-mapped address is sent as IPv4, and an idle time past the field saturates.
	f := good
	f.Client = netip.AddrPortFrom(netip.AddrFrom16(f.Client.Addr().As16()), f.Client.Port())
	f.Idle = 100 * 24 * time.Hour
	m, reason := newDecoder(testSecret).open(seal(t, testSecret, msgUpdates, resyncRef{}, 1, 1, time.Now(), []datapath.ReplicatedFlow{f}))
	if reason != "" || m.flows[0].Client != good.Client || m.flows[0].Idle != maxIdleMilli*time.Millisecond {
		t.Errorf("got %+v %q", m.flows, reason)
	}
}

// crossFamilyFlows are tunnel flows whose backends are of the other family: 6in4 and 4in6.
func crossFamilyFlows() []datapath.ReplicatedFlow {
	return []datapath.ReplicatedFlow{
		{Protocol: config.ProtocolTCP, Client: netip.MustParseAddrPort("[2001:db8:1::7]:40007"),
			Listener: netip.MustParseAddrPort("[2001:db8::10]:80"), Backend: netip.MustParseAddrPort("10.9.0.2:0"), Idle: time.Second},
		{Protocol: config.ProtocolUDP, Client: netip.MustParseAddrPort("10.1.0.7:40008"),
			Listener: netip.MustParseAddrPort("192.0.2.10:53"), Backend: netip.MustParseAddrPort("[2001:db8:9::2]:0"), Closing: true},
	}
}

// TestWireCrossFamily: a tunnel's flow across families travels as a mixed record, in datagrams
// that hold no other kind (an older receiver drops those whole and keeps the rest), and decodes
// to the same flow; mapped addresses are refused outside mixed records.
func TestWireCrossFamily(t *testing.T) {
	mixed := crossFamilyFlows()
	m, reason := newDecoder(testSecret).open(seal(t, testSecret, msgUpdates, resyncRef{}, 1, 1, time.Now(), mixed))
	if reason != "" || !reflect.DeepEqual(m.flows, mixed) {
		t.Fatalf("got %+v %q, want %+v", m.flows, reason, mixed)
	}
	enc := newEncoder(DefaultMTU)
	enc.reset(msgUpdates, resyncRef{})
	plain := testFlows(1, false)[0]
	if ok, err := enc.add(&plain); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := enc.add(&mixed[0]); ok || err != nil {
		t.Errorf("a mixed record joined a datagram of plain ones (%v, %v)", ok, err)
	}
	enc.reset(msgUpdates, resyncRef{})
	if ok, err := enc.add(&mixed[0]); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := enc.add(&plain); ok || err != nil {
		t.Errorf("a plain record joined a datagram of mixed ones (%v, %v)", ok, err)
	}
	// the same bytes with the record's family byte made IPv6: a mapped address there is refused
	b := seal(t, testSecret, msgUpdates, resyncRef{}, 1, 2, time.Now(), mixed[:1])
	b[headerSize] = familyIPv6
	if _, _, ok := newDecoder(testSecret).records(b[headerSize:len(b)-macSize], 1); ok {
		t.Error("an IPv6 record with a mapped IPv4 backend decoded")
	}
}

// decodeSeeds are valid datagrams and broken ones.
func decodeSeeds(t testing.TB) [][]byte {
	now := time.Unix(1700000000, 0)
	updates := seal(t, testSecret, msgUpdates, resyncRef{}, 1, 1, now, testFlows(5, false))
	data := seal(t, testSecret, msgResyncData, resyncRef{2, 3}, 1, 2, now, testFlows(4, true))
	heartbeat := seal(t, testSecret, msgHeartbeat, resyncRef{}, 1, 3, now, nil)
	refresh := seal(t, testSecret, msgRefresh, resyncRef{}, 1, 5, now, testFlows(3, false))
	mixed := seal(t, testSecret, msgUpdates, resyncRef{}, 1, 6, now, crossFamilyFlows())
	enc := newEncoder(DefaultMTU)
	enc.reset(msgResyncEnd, resyncRef{2, 3})
	enc.setTotal(4)
	end := bytes.Clone(enc.seal(newMAC(testSecret), 1, 4, now))
	flipped := bytes.Clone(updates)
	flipped[40] ^= 1
	return [][]byte{updates, data, heartbeat, end, refresh, mixed, flipped, updates[:len(updates)-1], updates[:minDatagram-1],
		[]byte("GET / HTTP/1.1\r\n\r\n"), {}, seal(t, []byte("another secret, 16+ bytes"), msgHeartbeat, resyncRef{}, 1, 1, now, nil)}
}

// FuzzDecode: the decoder never panics, never grows its record buffer, and what it decodes
// encodes back to the same bytes. Each input is tried as it came and with a valid HMAC, so that
// the fuzzer reaches the body decoder.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds(f) {
		f.Add(s)
	}
	dec := newDecoder(testSecret)
	mac := newMAC(testSecret)
	f.Fuzz(func(t *testing.T, b []byte) {
		dec.open(b)
		if len(b) < minDatagram || len(b) > maxDatagram {
			return
		}
		signed := bytes.Clone(b[:len(b)-macSize])
		mac.Reset()
		mac.Write(signed)
		signed = mac.Sum(signed)
		m, reason := dec.open(signed)
		if cap(dec.flows) != maxRecords {
			t.Fatalf("record buffer grew to %d", cap(dec.flows))
		}
		if reason != "" {
			return
		}
		enc := newEncoder(maxDatagram)
		enc.reset(m.kind, m.ref)
		for i := range m.flows {
			if ok, err := enc.add(&m.flows[i]); !ok || err != nil {
				t.Fatalf("decoded flow %+v does not encode: %v", m.flows[i], err)
			}
		}
		if m.kind == msgResyncEnd {
			enc.setTotal(m.total)
		}
		if again := enc.seal(mac, m.node, m.seq, time.Unix(0, m.time)); !bytes.Equal(again, signed) {
			t.Fatalf("decoded %+v encodes to\n%x\nnot\n%x", m, again, signed)
		}
	})
}

// BenchmarkEncodeDecode: flows through encoding, HMAC, its check and decoding, in full
// datagrams of the default MTU.
func BenchmarkEncodeDecode(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		b.Run(fmt.Sprintf("ipv6=%v", v6), func(b *testing.B) {
			flows := testFlows(4096, v6)
			enc := newEncoder(DefaultMTU)
			mac := newMAC(testSecret)
			dec := newDecoder(testSecret)
			now := time.Now()
			var n, seq uint64
			send := func() {
				seq++
				if _, reason := dec.open(enc.seal(mac, 1, seq, now)); reason != "" {
					b.Fatal(reason)
				}
				n += uint64(enc.count)
				enc.reset(msgUpdates, resyncRef{})
			}
			enc.reset(msgUpdates, resyncRef{})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				f := &flows[i%len(flows)]
				if ok, _ := enc.add(f); !ok {
					send()
					_, _ = enc.add(f)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "flows/s")
		})
	}
}

// A record of the kernel's conntrack table carries its TCP state in its fourth byte; a state on a
// datagram flow, or past the last, does not decode.
func TestWireTCPState(t *testing.T) {
	flows := testFlows(2, false)
	flows[0].TCPState, flows[1].TCPState = 3, maxTCPState
	dec := newDecoder(testSecret)
	m, reason := dec.open(seal(t, testSecret, msgResyncData, resyncRef{1, 2}, 42, 1, time.Now(), flows))
	if reason != "" || !reflect.DeepEqual(m.flows, flows) {
		t.Fatalf("decoded %+v (%q), want %+v", m.flows, reason, flows)
	}
	for name, f := range map[string]func(*datapath.ReplicatedFlow){
		"a state past the last":      func(f *datapath.ReplicatedFlow) { f.TCPState = maxTCPState + 1 },
		"a state on a datagram flow": func(f *datapath.ReplicatedFlow) { f.Protocol = config.ProtocolUDP },
	} {
		bad := testFlows(1, false)
		bad[0].TCPState = 3
		f(&bad[0])
		if _, reason := dec.open(seal(t, testSecret, msgResyncData, resyncRef{1, 2}, 42, 2, time.Now(), bad)); reason != DropDecodeError {
			t.Errorf("%s: dropped as %q, want %q", name, reason, DropDecodeError)
		}
	}
}
