package nft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/nlattr"
)

// Sluice's tables are read back over netlink, one dump per kind of object and one per set, rather
// than with `nft --json list table`: nft 1.0.6 builds its whole cache and its JSON tree first,
// which took 1.7 GB and 17 s for 10,000 services (700,000 elements), where the dumps stream.

// errNoTable is returned by readTable when the table does not exist.
var errNoTable = errors.New("no such table")

// readTable reads Sluice's table of family f into st, or returns errNoTable.
func readTable(st *state, f knftables.Family) error {
	chains, err := dumpTable(f, unix.NFT_MSG_GETCHAIN, unix.NFT_MSG_NEWCHAIN, unix.NFTA_CHAIN_TABLE)
	if err != nil {
		return err
	}
	for _, m := range chains {
		if name := nameAttr(m, unix.NFTA_CHAIN_NAME); name != "" {
			st.chains[objKey{f, name}] = &chainDef{chain: &knftables.Chain{Family: f, Table: TableName, Name: name}}
		}
	}
	counters, err := readCounters(f)
	if err != nil {
		return err
	}
	for name, c := range counters {
		st.counters[objKey{f, name}] = c
	}
	sets, err := dumpTable(f, unix.NFT_MSG_GETSET, unix.NFT_MSG_NEWSET, unix.NFTA_SET_TABLE)
	if err != nil {
		return err
	}
	for _, m := range sets {
		name, flags := setOf(m)
		if name == "" {
			continue
		}
		var obj knftables.Object = &knftables.Set{Name: name}
		if flags&(unix.NFT_SET_MAP|unix.NFT_SET_OBJECT) != 0 {
			obj = &knftables.Map{Name: name}
		}
		def := st.addSet(f, obj)
		if isPacketPathSet(name) {
			continue // the packet path owns these sets' elements: never reconciled
		}
		if err := readElements(def, f, name); err != nil {
			return fmt.Errorf("%s %s: %w", f, name, err)
		}
	}
	st.tables[f] = true
	return nil
}

// packetPathKinds are the kinds of the sets whose elements the packet path writes: the dsr flow
// maps, the persistence maps, the per-source and connection count sets of the limits; and the
// second chance maps, whose elements Apply writes as slots change (secondchance.go).
var packetPathKinds = map[serviceKind]bool{flowsMap: true, prevMap: true, persistMap: true, srcRateLimit: true, connsLimit: true, srcConnLimit: true}

// isPacketPathSet tells whether name is a set of one of packetPathKinds.
func isPacketPathSet(name string) bool {
	o, ok := parseServiceObject(name)
	return ok && packetPathKinds[o.kind]
}

// dumpTable dumps the objects of one kind (request get, replies of type reply) of Sluice's table
// of family f; tableAttr is the kind's table attribute. A missing table is errNoTable.
func dumpTable(f knftables.Family, get, reply int, tableAttr uint16) ([][]byte, error) {
	msgs, err := dump(func() *nl.NetlinkRequest {
		req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|get, unix.NLM_F_DUMP)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[f], Version: unix.NFNETLINK_V0})
		req.AddData(nl.NewRtAttr(int(tableAttr), nl.ZeroTerminated(TableName)))
		return req
	}, uint16(unix.NFNL_SUBSYS_NFTABLES<<8|reply))
	if errors.Is(err, unix.ENOENT) {
		return nil, errNoTable
	}
	return msgs, err
}

// readElements reads the elements of one set into def, written the way rendering writes them.
func readElements(def *setDef, f knftables.Family, set string) error {
	msgs, err := dump(func() *nl.NetlinkRequest {
		req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETSETELEM, unix.NLM_F_DUMP)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[f], Version: unix.NFNETLINK_V0})
		req.AddData(nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_TABLE, nl.ZeroTerminated(TableName)))
		req.AddData(nl.NewRtAttr(unix.NFTA_SET_ELEM_LIST_SET, nl.ZeroTerminated(set)))
		return req
	}, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWSETELEM)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		for _, list := range attrsOf(m) {
			if list.Attr.Type&nl.NLA_TYPE_MASK != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			elems, err := nlattr.Parse(list.Value)
			if err != nil {
				return err
			}
			for _, raw := range elems {
				e, ok, err := elementOf(set, raw.Value)
				if err != nil {
					return err
				}
				if ok {
					def.add(e)
				}
			}
		}
	}
	return nil
}

// netlinkElement is one element as the kernel dumps it.
type netlinkElement struct {
	key, value []byte // NFTA_DATA_VALUE of the key and of the data
	chain      string // a verdict's chain
	verdict    int32
	objref     string
	comment    *string
	flags      uint32
}

// elementOf decodes one dumped element of set into its rendered form; ok is false for an
// interval's end, which rendering does not write.
func elementOf(set string, b []byte) (*knftables.Element, bool, error) {
	var n netlinkElement
	attrs, err := nlattr.Parse(b)
	if err != nil {
		return nil, false, err
	}
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.NFTA_SET_ELEM_KEY:
			n.key = dataValue(a.Value)
		case unix.NFTA_SET_ELEM_DATA:
			n.value, n.verdict, n.chain = dataOf(a.Value)
		case unix.NFTA_SET_ELEM_OBJREF:
			n.objref = string(bytes.TrimRight(a.Value, "\x00"))
		case unix.NFTA_SET_ELEM_FLAGS:
			if len(a.Value) == 4 {
				n.flags = binary.BigEndian.Uint32(a.Value)
			}
		case unix.NFTA_SET_ELEM_USERDATA:
			n.comment = userdataComment(a.Value)
		}
	}
	if n.flags&unix.NFT_SET_ELEM_INTERVAL_END != 0 {
		return nil, false, nil
	}
	e := &knftables.Element{Comment: n.comment}
	if e.Value, err = n.renderedValue(set); err != nil {
		return nil, false, err
	}
	if n.comment != nil {
		return e, true, nil // the comment says the key (see elementID)
	}
	if e.Key, err = renderedKey(set, n.key); err != nil {
		return nil, false, err
	}
	return e, true, nil
}

// renderedValue writes the data of an element of set as rendering does: "goto chain", a
// counter's name, an address (a snat map's source) or a number (a mark, a weight).
func (n *netlinkElement) renderedValue(set string) ([]string, error) {
	switch {
	case isShared(set, snatKind):
		if addr, ok := netip.AddrFromSlice(n.value); ok {
			return []string{addr.String()}, nil
		}
	case n.chain != "" && n.verdict == unix.NFT_GOTO:
		return []string{gotoVerdict(n.chain)}, nil
	case n.chain != "" && n.verdict == unix.NFT_JUMP:
		return []string{"jump " + n.chain}, nil
	case n.objref != "":
		return []string{n.objref}, nil
	case len(n.value) == 4:
		return []string{strconv.FormatUint(uint64(binary.NativeEndian.Uint32(n.value)), 10)}, nil
	case n.value == nil && n.chain == "":
		return nil, nil // a set's element
	}
	return nil, fmt.Errorf("cannot read element data %x (verdict %d)", n.value, n.verdict)
}

// renderedKey writes the key of an element of one of a service's sets as rendering does: a slot
// or a mark as a number, a members key as its address and port.
func renderedKey(set string, key []byte) ([]string, error) {
	switch {
	case len(key) == 4 && !isServiceObject(set, membersMap):
		return []string{strconv.FormatUint(uint64(binary.NativeEndian.Uint32(key)), 10)}, nil
	case isServiceObject(set, membersMap) && (len(key) == 8 || len(key) == 20):
		addr, ok := netip.AddrFromSlice(key[:len(key)-4])
		if !ok {
			return nil, fmt.Errorf("bad address in key %x", key)
		}
		port := binary.BigEndian.Uint16(key[len(key)-4:])
		return []string{addr.String(), strconv.Itoa(int(port))}, nil
	}
	return nil, fmt.Errorf("cannot read key %x of an element without a comment", key)
}

// dataValue is the NFTA_DATA_VALUE nested in b.
func dataValue(b []byte) []byte {
	value, _, _ := dataOf(b)
	return value
}

// dataOf decodes an NFTA_DATA_* nest: a value, or a verdict with its chain.
func dataOf(b []byte) (value []byte, verdict int32, chain string) {
	attrs, err := nlattr.Parse(b)
	if err != nil {
		return nil, 0, ""
	}
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.NFTA_DATA_VALUE:
			value = a.Value
		case unix.NFTA_DATA_VERDICT:
			v, err := nlattr.Parse(a.Value)
			if err != nil {
				continue
			}
			for _, x := range v {
				switch x.Attr.Type & nl.NLA_TYPE_MASK {
				case unix.NFTA_VERDICT_CODE:
					if len(x.Value) == 4 {
						verdict = int32(binary.BigEndian.Uint32(x.Value))
					}
				case unix.NFTA_VERDICT_CHAIN:
					chain = string(bytes.TrimRight(x.Value, "\x00"))
				}
			}
		}
	}
	return value, verdict, chain
}

// userdataComment is the comment among an element's user data TLVs (libnftnl's
// NFTNL_UDATA_SET_ELEM_COMMENT: type 0, a length byte, the string and its NUL), nil if none.
func userdataComment(b []byte) *string {
	const commentType = 0
	for len(b) >= 2 {
		typ, n := b[0], int(b[1])
		if len(b) < 2+n {
			return nil
		}
		if typ == commentType {
			c := string(bytes.TrimRight(b[2:2+n], "\x00"))
			return &c
		}
		b = b[2+n:]
	}
	return nil
}

// setOf decodes the name and flags of an NFT_MSG_NEWSET message.
func setOf(msg []byte) (string, uint32) {
	var name string
	var flags uint32
	for _, a := range attrsOf(msg) {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.NFTA_SET_NAME:
			name = string(bytes.TrimRight(a.Value, "\x00"))
		case unix.NFTA_SET_FLAGS:
			if len(a.Value) == 4 {
				flags = binary.BigEndian.Uint32(a.Value)
			}
		}
	}
	return name, flags
}

// nameAttr is the string attribute typ of a message.
func nameAttr(msg []byte, typ uint16) string {
	for _, a := range attrsOf(msg) {
		if a.Attr.Type&nl.NLA_TYPE_MASK == typ {
			return string(bytes.TrimRight(a.Value, "\x00"))
		}
	}
	return ""
}

// attrsOf parses the attributes of an nfnetlink message (none when it is malformed).
func attrsOf(msg []byte) []syscall.NetlinkRouteAttr {
	if len(msg) < nl.SizeofNfgenmsg {
		return nil
	}
	return nlattr.Nested(msg[nl.SizeofNfgenmsg:])
}
