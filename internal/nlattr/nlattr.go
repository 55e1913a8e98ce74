// Package nlattr decodes netlink attributes without trusting their lengths: the netlink
// library's parser slices past the end of a buffer whose last attribute is shorter than its
// alignment (a truncated message), and panics.
package nlattr

import (
	"errors"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// errOverrun is Parse's error for an attribute whose length does not fit the buffer.
var errOverrun = errors.New("netlink attribute longer than its message")

// Parse decodes the attributes in b, as nl.ParseRouteAttr does; an attribute shorter than its
// header or longer than what is left of b is an error, never a panic. The values alias b.
func Parse(b []byte) ([]syscall.NetlinkRouteAttr, error) {
	var attrs []syscall.NetlinkRouteAttr
	for len(b) >= unix.SizeofRtAttr {
		n := int(nl.NativeEndian().Uint16(b[0:2]))
		if n < unix.SizeofRtAttr || n > len(b) {
			return nil, errOverrun
		}
		attrs = append(attrs, syscall.NetlinkRouteAttr{
			Attr:  syscall.RtAttr{Len: uint16(n), Type: nl.NativeEndian().Uint16(b[2:4])},
			Value: b[unix.SizeofRtAttr:n],
		})
		b = b[min(align(n), len(b)):]
	}
	return attrs, nil
}

// Nested is the attributes in b, none when one of them overruns b: for nested attributes, whose
// parent's decoder has nothing better to do with a malformed one than to skip it.
func Nested(b []byte) []syscall.NetlinkRouteAttr {
	attrs, _ := Parse(b)
	return attrs
}

// align rounds an attribute's length up to the 4 bytes netlink aligns attributes to.
func align(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }
