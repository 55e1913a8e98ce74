package conntrackd

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strings"
)

// Sizing of conntrackd's buffers and cache.
const (
	// socketBuffer is the send and receive buffer of the sync link's socket: the manual's
	// example, ten times a default one, so that a burst of new flows is not dropped by the
	// socket before FTFW's resend queue has to recover it.
	socketBuffer = 1249280
	// netlinkBuffer and netlinkBufferMax bound the socket conntrackd reads the kernel's events
	// from: it doubles the buffer on an overrun up to the max, and resyncs with the kernel
	// table after one (NetlinkOverrunResync).
	netlinkBuffer    = 2 << 20
	netlinkBufferMax = 16 << 20
	// hashSizeMin and hashSizeMax bound the buckets of conntrackd's cache.
	hashSizeMin = 8192
	hashSizeMax = 1 << 20
	// DefaultTableSize is the table size assumed when the namespace's cannot be read.
	DefaultTableSize = 262144
)

// Render is conntrackd's configuration file for o, whose Address and TableSize are settled (the
// Supervisor finds them on the host). FTFW with the external cache disabled: what a peer sends
// is written straight into this node's kernel table, where nftables finds it on a takeover.
func Render(o *Options) (string, error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	if !o.Address.IsValid() {
		return "", errors.New("rendering conntrackd.conf: sync.address is not settled")
	}
	size := o.TableSize
	if size == 0 {
		size = DefaultTableSize
	}
	var b strings.Builder
	b.WriteString("# Written by Sluice (internal/conntrackd) from the sync section: edits are overwritten.\n")
	b.WriteString("Sync {\n")
	b.WriteString("\tMode FTFW {\n")
	b.WriteString("\t\t# Replicated entries go straight into the kernel's conntrack table: a takeover\n")
	b.WriteString("\t\t# needs no commit (conntrackd -c has nothing to commit).\n")
	b.WriteString("\t\tDisableExternalCache On\n")
	b.WriteString("\t\t# A node that starts takes its peers' tables from the daemon (sync.port + 2).\n")
	b.WriteString("\t\tStartupResync Off\n")
	b.WriteString("\t}\n")
	writeTransport(&b, o)
	b.WriteString("}\n")
	b.WriteString("General {\n")
	b.WriteString("\t# Sluice supervises conntrackd: no systemd notification, its log on stderr.\n")
	b.WriteString("\tSystemd Off\n")
	b.WriteString("\tLogFile Off\n")
	b.WriteString("\tSyslog Off\n")
	fmt.Fprintf(&b, "\tHashSize %d\n", hashSize(size))
	fmt.Fprintf(&b, "\tHashLimit %d\n", 2*size)
	fmt.Fprintf(&b, "\tLockFile %s\n", o.LockPath())
	fmt.Fprintf(&b, "\tUNIX {\n\t\tPath %s\n\t}\n", o.SocketPath())
	fmt.Fprintf(&b, "\tNetlinkBufferSize %d\n", netlinkBuffer)
	fmt.Fprintf(&b, "\tNetlinkBufferSizeMaxGrowth %d\n", netlinkBufferMax)
	b.WriteString("\tNetlinkOverrunResync On\n")
	writeFilter(&b, o)
	b.WriteString("}\n")
	return b.String(), nil
}

// writeTransport writes the dedicated link: UDP to the one peer, else multicast to the group.
func writeTransport(b *strings.Builder, o *Options) {
	v := "IPv4"
	if !o.Family().Is4() {
		v = "IPv6"
	}
	dst := o.Destination()
	if !dst.IsMulticast() {
		b.WriteString("\tUDP {\n")
		fmt.Fprintf(b, "\t\t%s_address %s\n", v, o.Address)
		fmt.Fprintf(b, "\t\t%s_Destination_Address %s\n", v, dst)
		fmt.Fprintf(b, "\t\tPort %d\n", o.Port)
	} else {
		b.WriteString("\tMulticast {\n")
		fmt.Fprintf(b, "\t\t%s_address %s\n", v, dst)
		if v == "IPv4" { // IPv6 takes the interface's index from Interface
			fmt.Fprintf(b, "\t\tIPv4_interface %s\n", o.Address)
		}
		fmt.Fprintf(b, "\t\tGroup %d\n", o.Port)
	}
	fmt.Fprintf(b, "\t\tInterface %s\n", o.Interface)
	fmt.Fprintf(b, "\t\tSndSocketBuffer %d\n", socketBuffer)
	fmt.Fprintf(b, "\t\tRcvSocketBuffer %d\n", socketBuffer)
	b.WriteString("\t\tChecksum On\n")
	b.WriteString("\t}\n")
}

// writeFilter keeps what Sluice balances: TCP and UDP flows, none of the node's own on loopback
// or on the sync link (conntrackd's own messages included), and of a TCP connection only the
// states a peer needs to take it over or let it go, as the conntrack-tools manual advises: the
// kernel drops the handshake's and the closing's other events before conntrackd reads them (a
// connection taken over in its handshake starts again with the client's next SYN).
func writeFilter(b *strings.Builder, o *Options) {
	b.WriteString("\tFilter From Kernelspace {\n")
	b.WriteString("\t\tProtocol Accept {\n\t\t\tTCP\n\t\t\tUDP\n\t\t}\n")
	b.WriteString("\t\tState Accept {\n\t\t\tESTABLISHED CLOSED TIME_WAIT CLOSE_WAIT for TCP\n\t\t}\n")
	b.WriteString("\t\tAddress Ignore {\n")
	b.WriteString("\t\t\tIPv4_address 127.0.0.0/8 # loopback\n")
	b.WriteString("\t\t\tIPv6_address ::1 # loopback\n")
	fmt.Fprintf(b, "\t\t\t%s # this node on the sync link\n", filterAddress(o.Address))
	for _, p := range o.Peers {
		fmt.Fprintf(b, "\t\t\t%s # a peer on the sync link\n", filterAddress(p))
	}
	b.WriteString("\t\t}\n")
	b.WriteString("\t}\n")
}

func filterAddress(a netip.Addr) string {
	if a.Is4() {
		return "IPv4_address " + a.String()
	}
	return "IPv6_address " + a.String()
}

// hashSize is the number of buckets for a table of size entries: a quarter of it, a power of
// two, bounded.
func hashSize(size int) int {
	n := max(size/4, 1)
	p := 1 << bits.Len(uint(n-1))
	return min(max(p, hashSizeMin), hashSizeMax)
}
