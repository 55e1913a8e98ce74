package nft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/nlattr"
)

// Two things are read from nf_tables over netlink rather than through nft, because nft 1.0.6 loads
// the whole ruleset first, which takes seconds once the tables hold a million elements: the named
// counters (a dump of NFT_MSG_GETOBJ filtered to Sluice's table and to counters: 20,000 of them in
// milliseconds), and the ruleset's generation (NFT_MSG_GETGEN), which every transaction in the
// network namespace advances.

// nfproto is the nfnetlink family of each of Sluice's table families.
var nfproto = map[knftables.Family]uint8{knftables.InetFamily: unix.NFPROTO_INET, knftables.NetDevFamily: unix.NFPROTO_NETDEV}

// rulesetGeneration is the current generation of the network namespace's ruleset; 0 when it
// cannot be read.
func rulesetGeneration() uint32 {
	msgs, err := generationRequest().Execute(unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWGEN)
	if err != nil || len(msgs) == 0 {
		return 0
	}
	return generationAttribute(msgs[0])
}

// generationOn is rulesetGeneration asked on s, a socket of the namespace to ask about (the
// calling thread's may be another); 0 when it cannot be read.
func generationOn(s *nl.NetlinkSocket) uint32 {
	if err := s.Send(generationRequest()); err != nil {
		return 0
	}
	msgs, _, err := s.Receive()
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWGEN {
			return generationAttribute(m.Data)
		}
	}
	return 0
}

// generationRequest asks for the ruleset's generation (NFT_MSG_GETGEN).
func generationRequest() *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN, 0)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: unix.NFNETLINK_V0})
	return req
}

// generationAttribute reads NFTA_GEN_ID from an NFT_MSG_NEWGEN message's payload; 0 when absent.
func generationAttribute(data []byte) uint32 {
	if len(data) < nl.SizeofNfgenmsg {
		return 0
	}
	attrs, err := nlattr.Parse(data[nl.SizeofNfgenmsg:])
	if err != nil {
		return 0
	}
	for _, a := range attrs {
		if a.Attr.Type&nl.NLA_TYPE_MASK == unix.NFTA_GEN_ID && len(a.Value) == 4 {
			return binary.BigEndian.Uint32(a.Value)
		}
	}
	return 0
}

// dumpTries is how many times a dump interrupted by a concurrent transaction is started again.
const dumpTries = 5

// dump runs a netlink dump of Sluice's table that request builds, with replies of type reply; a
// dump that a transaction committed meanwhile interrupts (its results would mix two rulesets: the
// kernel says so) is started again. The kernel filters some dumps by the table the request names
// but not all (chains: every table of the family comes back), so replies of another table are
// dropped here: an operator's `inet filter` table must never be taken for Sluice's.
func dump(request func() *nl.NetlinkRequest, reply uint16) ([][]byte, error) {
	var msgs [][]byte
	var err error
	for range dumpTries {
		msgs, err = request().Execute(unix.NETLINK_NETFILTER, reply)
		if !errors.Is(err, nl.ErrDumpInterrupted) {
			break
		}
	}
	return slices.DeleteFunc(msgs, func(m []byte) bool { return !ofSluiceTable(m) }), err
}

// ofSluiceTable tells whether an nf_tables message (a chain, set, object or element list, each
// naming its table in attribute 1) is of Sluice's table.
func ofSluiceTable(msg []byte) bool {
	if len(msg) < nl.SizeofNfgenmsg {
		return false
	}
	attrs, err := nlattr.Parse(msg[nl.SizeofNfgenmsg:])
	if err != nil {
		return false
	}
	for _, a := range attrs {
		if a.Attr.Type&nl.NLA_TYPE_MASK == 1 { // NFTA_{CHAIN,SET,OBJ,SET_ELEM_LIST}_TABLE
			return string(bytes.TrimRight(a.Value, "\x00")) == TableName
		}
	}
	return false
}

// readCounters reads every named counter of Sluice's table of family f in the current network
// namespace, by name; none when the table does not exist.
func readCounters(f knftables.Family) (map[string]*knftables.Counter, error) {
	msgs, err := dump(func() *nl.NetlinkRequest {
		req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETOBJ, unix.NLM_F_DUMP)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[f], Version: unix.NFNETLINK_V0})
		req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_TABLE, nl.ZeroTerminated(TableName)))
		req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_TYPE, binary.BigEndian.AppendUint32(nil, unix.NFT_OBJECT_COUNTER)))
		return req
	}, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWOBJ)
	if err != nil {
		return nil, fmt.Errorf("reading the counters of %s %s: %w", f, TableName, err)
	}
	out := make(map[string]*knftables.Counter, len(msgs))
	for _, m := range msgs {
		if name, c, ok := counterOf(m); ok {
			c.Family, c.Table, c.Name = f, TableName, name
			out[name] = c
		}
	}
	return out, nil
}

// counterOf decodes the name, packets and bytes of an NFT_MSG_NEWOBJ message holding a counter.
func counterOf(msg []byte) (string, *knftables.Counter, bool) {
	if len(msg) < nl.SizeofNfgenmsg {
		return "", nil, false
	}
	attrs, err := nlattr.Parse(msg[nl.SizeofNfgenmsg:])
	if err != nil {
		return "", nil, false
	}
	var name string
	var c *knftables.Counter
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.NFTA_OBJ_NAME:
			name = string(bytes.TrimRight(a.Value, "\x00"))
		case unix.NFTA_OBJ_DATA:
			data, err := nlattr.Parse(a.Value)
			if err != nil {
				return "", nil, false
			}
			var packets, bytes uint64
			for _, d := range data {
				if len(d.Value) != 8 {
					continue
				}
				switch d.Attr.Type & nl.NLA_TYPE_MASK {
				case unix.NFTA_COUNTER_PACKETS:
					packets = binary.BigEndian.Uint64(d.Value)
				case unix.NFTA_COUNTER_BYTES:
					bytes = binary.BigEndian.Uint64(d.Value)
				}
			}
			c = &knftables.Counter{Packets: &packets, Bytes: &bytes}
		}
	}
	return name, c, name != "" && c != nil
}

// existingTables tells which of Sluice's tables exist, each asked for by name.
func existingTables() (map[knftables.Family]bool, error) {
	out := map[knftables.Family]bool{}
	for _, f := range families {
		req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETTABLE, 0)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[f], Version: unix.NFNETLINK_V0})
		req.AddData(nl.NewRtAttr(unix.NFTA_TABLE_NAME, nl.ZeroTerminated(TableName)))
		_, err := req.Execute(unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWTABLE)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return nil, fmt.Errorf("looking for %s %s: %w", f, TableName, err)
		default:
			out[f] = true
		}
	}
	return out, nil
}
