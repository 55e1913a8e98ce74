package nft

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// Named counters are read one by one over netlink (NFT_MSG_GETOBJ): nft 1.0.6 loads the whole
// ruleset before it lists even one counter, which takes seconds once the tables hold a million
// elements, while the kernel answers for one object in microseconds.

// nfproto is the nfnetlink family of each of Sluice's table families.
var nfproto = map[knftables.Family]uint8{knftables.InetFamily: unix.NFPROTO_INET, knftables.NetDevFamily: unix.NFPROTO_NETDEV}

// readCounter reads the named counter of Sluice's table of family f in the current network
// namespace.
func readCounter(f knftables.Family, name string) (*knftables.Counter, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETOBJ, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[f], Version: unix.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_TABLE, nl.ZeroTerminated(TableName)))
	req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_NAME, nl.ZeroTerminated(name)))
	req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_TYPE, binary.BigEndian.AppendUint32(nil, unix.NFT_OBJECT_COUNTER)))
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWOBJ)
	if err != nil {
		return nil, fmt.Errorf("reading counter %s of %s %s: %w", name, f, TableName, err)
	}
	for _, m := range msgs {
		if c, ok := counterOf(m); ok {
			c.Family, c.Table, c.Name = f, TableName, name
			return c, nil
		}
	}
	return nil, fmt.Errorf("reading counter %s of %s %s: no answer", name, f, TableName)
}

// counterOf decodes the packets and bytes of an NFT_MSG_NEWOBJ message holding a counter.
func counterOf(msg []byte) (*knftables.Counter, bool) {
	if len(msg) < nl.SizeofNfgenmsg {
		return nil, false
	}
	attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
	if err != nil {
		return nil, false
	}
	for _, a := range attrs {
		if a.Attr.Type&nl.NLA_TYPE_MASK != unix.NFTA_OBJ_DATA {
			continue
		}
		data, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return nil, false
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
		return &knftables.Counter{Packets: &packets, Bytes: &bytes}, true
	}
	return nil, false
}
