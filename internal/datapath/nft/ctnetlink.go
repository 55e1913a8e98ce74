package nft

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/ctnetlink"
)

// ctEntry is a conntrack entry and where its flow goes.
type ctEntry struct {
	ctnetlink.Entry
	flow natFlow
}

// active tells whether the entry is an active flow: an established TCP connection (IPVS's
// ActiveConn; handshakes and closing connections are its InActConn) or any UDP flow.
func (e ctEntry) active() bool {
	return e.flow.proto != unix.IPPROTO_TCP || e.TCPState == nl.TCP_CONNTRACK_ESTABLISHED
}

// established tells whether the entry carries a live connection: an established TCP connection
// or an answered datagram flow. Conntrack hands any other entry of a flow (a handshake, a closing
// or closed connection, an unanswered datagram flow) to a new connection that reuses its tuple,
// with its translation: to its backend, even one that has since fallen.
func (e ctEntry) established() bool {
	if e.flow.proto == unix.IPPROTO_TCP {
		return e.TCPState == nl.TCP_CONNTRACK_ESTABLISHED
	}
	return e.SeenReply()
}

// conntrackFamily is the address family of one IP version's conntrack entries.
func conntrackFamily(v ipv) uint8 {
	if v == ipv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// withConntrack runs fn with a ctnetlink socket of the calling thread's network namespace.
func withConntrack(fn func(*ctnetlink.Socket) error) error {
	s, err := ctnetlink.Open(netns.None())
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// eachCTEntry calls fn with each conntrack entry of one address family in the calling thread's
// network namespace. An interrupted dump (the table changed meanwhile) ends with what it read.
func eachCTEntry(family uint8, fn func(ctEntry)) error {
	err := withConntrack(func(s *ctnetlink.Socket) error {
		return s.Dump(family, func(e ctnetlink.Entry) bool {
			fn(ctEntryOf(e))
			return true
		})
	})
	if err != nil {
		return fmt.Errorf("reading conntrack: %w", err)
	}
	return nil
}

// dumpConntrack reads the conntrack entries of one address family in the calling thread's
// network namespace.
func dumpConntrack(family uint8) ([]ctEntry, error) {
	var entries []ctEntry
	err := eachCTEntry(family, func(e ctEntry) { entries = append(entries, e) })
	return entries, err
}

// deleteCTEntry deletes one entry; deleted is false when it was gone already.
func deleteCTEntry(family uint8, e ctEntry) (deleted bool, err error) {
	err = withConntrack(func(s *ctnetlink.Socket) error {
		deleted, err = s.Delete(family, e.Entry)
		return err
	})
	return deleted, err
}

func ctEntryOf(e ctnetlink.Entry) ctEntry {
	return ctEntry{Entry: e, flow: natFlow{proto: e.Orig.Proto, vip: e.Orig.Dst.Addr(), vport: e.Orig.Dst.Port(), backend: e.Reply.Src}}
}
