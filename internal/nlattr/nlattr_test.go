package nlattr

import (
	"reflect"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Parse reads what the netlink library writes, nested attributes and unaligned values included.
func TestParseReadsWhatNetlinkWrites(t *testing.T) {
	outer := nl.NewRtAttr(1|unix.NLA_F_NESTED, nil)
	outer.AddRtAttr(2, []byte{1, 2, 3}) // 7 bytes: padded to 8
	outer.AddRtAttr(3, []byte{4, 5, 6, 7})
	b := append(outer.Serialize(), nl.NewRtAttr(4, []byte{9}).Serialize()...)
	want, err := nl.ParseRouteAttr(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, want)
	}
	inner, err := Parse(got[0].Value)
	if err != nil || len(inner) != 2 || !reflect.DeepEqual(inner[0].Value, []byte{1, 2, 3}) {
		t.Errorf("nested: %+v, %v", inner, err)
	}
}

// Every truncation of a message is an error or fewer attributes, never a panic; a length that
// overruns the buffer or undercuts the header is an error.
func TestParseTruncated(t *testing.T) {
	b := append(nl.NewRtAttr(2, []byte{1, 2, 3}).Serialize(), nl.NewRtAttr(3, []byte{4, 5, 6, 7, 8, 9}).Serialize()...)
	for n := range len(b) {
		_, _ = Parse(b[:n])
	}
	if _, err := Parse(b[:8+9]); err == nil { // the second attribute is 10 bytes long
		t.Error("an attribute longer than the buffer parsed")
	}
	if _, err := Parse([]byte{2, 0, 1, 0}); err == nil {
		t.Error("an attribute shorter than its header parsed")
	}
	if got, err := Parse(b[:7]); err != nil || len(got) != 1 { // the first, unpadded, whole
		t.Errorf("an unpadded last attribute: %+v, %v", got, err)
	}
}
