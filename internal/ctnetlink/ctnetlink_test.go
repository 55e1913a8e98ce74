package ctnetlink

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// message is an IPCTNL_MSG_CT_NEW message of e as the kernel sends it: nfgenmsg, then attributes.
func message(e Entry) []byte {
	b := (&nl.Nfgenmsg{NfgenFamily: Family(e.Orig.Src.Addr()), Version: unix.NFNETLINK_V0}).Serialize()
	b = append(b, tupleAttr(nl.CTA_TUPLE_ORIG, e.Orig).Serialize()...)
	b = append(b, tupleAttr(nl.CTA_TUPLE_REPLY, e.Reply).Serialize()...)
	b = append(b, nl.NewRtAttr(nl.CTA_STATUS, nl.BEUint32Attr(e.Status)).Serialize()...)
	b = append(b, nl.NewRtAttr(nl.CTA_TIMEOUT, nl.BEUint32Attr(e.Timeout)).Serialize()...)
	b = append(b, nl.NewRtAttr(ctaZone, nl.BEUint16Attr(e.Zone)).Serialize()...)
	info := nl.NewRtAttr(nl.CTA_PROTOINFO|nestedAttribute, nil)
	info.AddRtAttr(nl.CTA_PROTOINFO_TCP|nestedAttribute, nil).AddRtAttr(nl.CTA_PROTOINFO_TCP_STATE, nl.Uint8Attr(e.TCPState))
	return append(b, info.Serialize()...)
}

func TestParseReadsWhatTheAttributesSay(t *testing.T) {
	for _, e := range []Entry{
		{
			Orig:     Tuple{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("198.51.100.1:1001"), Dst: netip.MustParseAddrPort("192.0.2.10:80")},
			Reply:    Tuple{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("10.1.0.5:8080"), Dst: netip.MustParseAddrPort("10.1.0.1:40001")},
			TCPState: nl.TCP_CONNTRACK_TIME_WAIT, Status: StatusSeenReply | StatusAssured, Timeout: 117, Zone: 3,
		},
		{
			Orig:     Tuple{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("[2001:db8:1::1]:1005"), Dst: netip.MustParseAddrPort("[2001:db8::10]:80")},
			Reply:    Tuple{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("[2001:db8:9::5]:8080"), Dst: netip.MustParseAddrPort("[2001:db8:1::1]:1005")},
			TCPState: nl.TCP_CONNTRACK_ESTABLISHED, Status: StatusSeenReply, Timeout: 431999,
		},
	} {
		got, ok := Parse(message(e))
		got.Attrs = nil
		if !ok || !reflect.DeepEqual(got, e) {
			t.Errorf("Parse = %+v, %v; want %+v", got, ok, e)
		}
		if !got.SeenReply() {
			t.Errorf("%+v: not seen replied", got)
		}
	}
}

// A message too short, or without its reply direction, is not an entry; nothing panics.
func TestParseRefusesWhatIsNotAnEntry(t *testing.T) {
	e := Entry{
		Orig:  Tuple{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("198.51.100.2:53000"), Dst: netip.MustParseAddrPort("192.0.2.10:53")},
		Reply: Tuple{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("10.1.0.5:53"), Dst: netip.MustParseAddrPort("198.51.100.2:53000")},
	}
	full := message(e)
	withoutReply := (&nl.Nfgenmsg{NfgenFamily: unix.AF_INET}).Serialize()
	withoutReply = append(withoutReply, tupleAttr(nl.CTA_TUPLE_ORIG, e.Orig).Serialize()...)
	for name, msg := range map[string][]byte{"empty": nil, "nfgenmsg only": full[:nl.SizeofNfgenmsg], "without reply": withoutReply} {
		if got, ok := Parse(msg); ok {
			t.Errorf("%s: parsed as %+v", name, got)
		}
	}
	for n := range len(full) {
		Parse(full[:n]) // any truncation: no panic
	}
}
