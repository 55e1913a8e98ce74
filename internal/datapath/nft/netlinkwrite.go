package nft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/nlattr"
)

// nft 1.0.6 reads the whole ruleset into its cache before it runs any command that adds an
// element or a rule: at 10,000 services the kernel's dumps of 40,000 sets, 40,000 counters and
// 30,000 chains took 1.1 s, whatever the change. The commands a change of backends makes are few
// and simple (named counters, regular chains, the backend chains' rules, elements of hash maps),
// so a transaction made only of them is encoded here and sent to nf_tables as one netlink batch,
// which the kernel commits or aborts whole, as it does nft's. A transaction with any other
// command goes through nft whole.

// errNotEncodable is an operation the netlink writer does not encode: the transaction goes
// through nft.
var errNotEncodable = errors.New("not encodable over netlink")

// maxBatchBytes bounds a netlink batch; a bigger change goes through nft, which splits its
// messages over several sends.
const maxBatchBytes = 4 << 20

// maxElementsBytes bounds the element list of one message: a netlink attribute's length is 16
// bits, and each element's encoding is far below the difference.
const maxElementsBytes = 32 << 10

// nft's datatypes (nftables' include/datatype.h), as the kernel keeps them in a set's key and
// data types; a concatenation's are packed 6 bits each, the first field highest.
const (
	typeInteger     = 4
	typeIPv4Addr    = 7
	typeIPv6Addr    = 8
	typeInetProto   = 12
	typeInetService = 13
	typeMark        = 19
	typeBits        = 6
)

// Kernel constants golang.org/x/sys/unix lacks (include/uapi/linux/netfilter/nf_tables.h).
const (
	nftaFwdSregAddr    = 2    // NFTA_FWD_SREG_ADDR
	nftaFwdNFProto     = 3    // NFTA_FWD_NFPROTO
	nftSetConcat       = 0x80 // NFT_SET_CONCAT
	nftaSetExpr        = 17   // NFTA_SET_EXPR
	nftaSetExpressions = 18   // NFTA_SET_EXPRESSIONS
)

// nlMessage is one nf_tables message of a batch.
type nlMessage struct {
	typ    uint16 // NFT_MSG_*
	flags  uint16 // NLM_F_* besides NLM_F_REQUEST
	family knftables.Family
	attrs  nlAttrs
	what   string // the command, for errors
}

// nlAttrs is a sequence of netlink attributes being built.
type nlAttrs []byte

func (a *nlAttrs) put(typ uint16, value []byte) {
	n := 4 + len(value)
	*a = binary.NativeEndian.AppendUint16(*a, uint16(n))
	*a = binary.NativeEndian.AppendUint16(*a, typ)
	*a = append(*a, value...)
	*a = append(*a, make([]byte, nlAlign(n)-n)...)
}

func (a *nlAttrs) str(typ uint16, s string)       { a.put(typ, append([]byte(s), 0)) }
func (a *nlAttrs) u32(typ uint16, v uint32)       { a.put(typ, binary.BigEndian.AppendUint32(nil, v)) }
func (a *nlAttrs) u64(typ uint16, v uint64)       { a.put(typ, binary.BigEndian.AppendUint64(nil, v)) }
func (a *nlAttrs) nest(typ uint16, inner nlAttrs) { a.put(typ|unix.NLA_F_NESTED, inner) }

// value nests b as an NFTA_DATA_VALUE in attribute typ.
func (a *nlAttrs) value(typ uint16, b []byte) {
	var v nlAttrs
	v.put(unix.NFTA_DATA_VALUE, b)
	a.nest(typ, v)
}

// expr appends one expression of a rule: its name and its attributes.
func (a *nlAttrs) expr(name string, data nlAttrs) {
	var e nlAttrs
	e.str(unix.NFTA_EXPR_NAME, name)
	e.nest(unix.NFTA_EXPR_DATA, data)
	a.nest(unix.NFTA_LIST_ELEM, e)
}

func nlAlign(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

// setInfo is what encoding a set's elements needs of its definition in the kernel.
type setInfo struct {
	flags             uint32
	keyType, keyLen   uint32
	dataType, dataLen uint32
	// keyHostOrder: the key's integers are in host byte order (nft's user data of the set).
	keyHostOrder bool
}

// netlinkWriter encodes a change into nf_tables messages for the calling thread's network
// namespace.
type netlinkWriter struct {
	sets     map[objKey]*setInfo // asked of the kernel once per set
	compiled *compiled           // the change's new sets and chains' rules, as nft compiled them
	msgs     []nlMessage
}

// encodeChange encodes cs as nf_tables messages; errNotEncodable when an operation is not one
// the writer knows.
func encodeChange(cs *changeSet) ([]nlMessage, error) {
	c, err := compileNew(cs)
	if err != nil {
		return nil, err
	}
	w := &netlinkWriter{sets: map[objKey]*setInfo{}, compiled: c}
	for i := 0; i < len(cs.ops); {
		op := cs.ops[i]
		if e, ok := op.obj.(*knftables.Element); ok {
			j := i + 1
			for j < len(cs.ops) && cs.ops[j].verb == op.verb && sameSet(cs.ops[j].obj, e) {
				j++
			}
			if err := w.elements(op.verb, cs.ops[i:j]); err != nil {
				return nil, fmt.Errorf("%w: elements of %s", err, e.Set+e.Map)
			}
			i = j
			continue
		}
		if err := w.encode(op); err != nil {
			return nil, fmt.Errorf("%w: %T %v", err, op.obj, op.obj)
		}
		i++
	}
	return w.msgs, nil
}

// sameSet tells whether obj is an element of e's set.
func sameSet(obj knftables.Object, e *knftables.Element) bool {
	o, ok := obj.(*knftables.Element)
	return ok && o.Family == e.Family && o.Set == e.Set && o.Map == e.Map
}

// encode encodes one operation on a counter, a chain or a rule.
func (w *netlinkWriter) encode(op operation) error {
	switch o := op.obj.(type) {
	case *knftables.Counter:
		return w.counter(op.verb, o)
	case *knftables.Chain:
		return w.chain(op.verb, o)
	case *knftables.Rule:
		return w.rule(op.verb, o)
	case *knftables.Map:
		return w.setOp(op.verb, o.Family, o.Table, o.Name)
	case *knftables.Set:
		return w.setOp(op.verb, o.Family, o.Table, o.Name)
	}
	return errNotEncodable
}

// newSet copies a set or map the change adds from its compiled definition; the writer encodes
// its elements from that definition too (the kernel has none yet).
func (w *netlinkWriter) newSet(f knftables.Family, name string) error {
	k := objKey{f, name}
	msg := w.compiled.sets[k]
	if msg == nil {
		return errNotEncodable
	}
	a := copied(msg, setAttrs...)
	a.u32(unix.NFTA_SET_ID, uint32(len(w.msgs)+1)) // required, unique in the batch
	w.add(nlMessage{unix.NFT_MSG_NEWSET, unix.NLM_F_CREATE, f, a, "add " + name})
	if s := setInfoOf(msg); s.flags&(unix.NFT_SET_INTERVAL|unix.NFT_SET_EVAL|nftSetConcat) == 0 {
		w.sets[k] = s
	}
	return nil
}

// setOp encodes the addition of a set or map (as nft compiled it: newSet), its flush (a
// DELSETELEM naming no element) or its deletion by name (a DELSET: a removed service's maps).
func (w *netlinkWriter) setOp(v verb, f knftables.Family, table, name string) error {
	if !ours(f, table) {
		return errNotEncodable
	}
	var a nlAttrs
	switch v {
	case verbAdd:
		return w.newSet(f, name)
	case verbFlush:
		a.str(unix.NFTA_SET_ELEM_LIST_TABLE, TableName)
		a.str(unix.NFTA_SET_ELEM_LIST_SET, name)
		w.add(nlMessage{unix.NFT_MSG_DELSETELEM, 0, f, a, "flush " + name})
	case verbDelete:
		a.str(unix.NFTA_SET_TABLE, TableName)
		a.str(unix.NFTA_SET_NAME, name)
		w.add(nlMessage{unix.NFT_MSG_DELSET, 0, f, a, "delete " + name})
	default:
		return errNotEncodable
	}
	return nil
}

// ours tells whether an object of family f in table belongs to one of Sluice's tables.
func ours(f knftables.Family, table string) bool {
	_, known := nfproto[f]
	return known && table == TableName
}

func (w *netlinkWriter) add(m nlMessage) { w.msgs = append(w.msgs, m) }

func (w *netlinkWriter) counter(v verb, c *knftables.Counter) error {
	if !ours(c.Family, c.Table) || c.Comment != nil || c.Handle != nil {
		return errNotEncodable
	}
	var a nlAttrs
	a.str(unix.NFTA_OBJ_TABLE, TableName)
	a.str(unix.NFTA_OBJ_NAME, c.Name)
	a.u32(unix.NFTA_OBJ_TYPE, unix.NFT_OBJECT_COUNTER)
	switch v {
	case verbAdd:
		var data nlAttrs
		data.u64(unix.NFTA_COUNTER_BYTES, valueOr0(c.Bytes))
		data.u64(unix.NFTA_COUNTER_PACKETS, valueOr0(c.Packets))
		a.nest(unix.NFTA_OBJ_DATA, data)
		w.add(nlMessage{unix.NFT_MSG_NEWOBJ, unix.NLM_F_CREATE, c.Family, a, "add counter " + c.Name})
	case verbDelete:
		w.add(nlMessage{unix.NFT_MSG_DELOBJ, 0, c.Family, a, "delete counter " + c.Name})
	default:
		return errNotEncodable
	}
	return nil
}

func valueOr0(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func (w *netlinkWriter) chain(v verb, c *knftables.Chain) error {
	if !ours(c.Family, c.Table) || c.Handle != nil {
		return errNotEncodable
	}
	var a nlAttrs
	switch v {
	case verbAdd:
		if c.Type != nil || c.Hook != nil || c.Priority != nil || c.Device != nil || c.Comment != nil || c.Policy != nil {
			return errNotEncodable // base chains and comments: nft
		}
		a.str(unix.NFTA_CHAIN_TABLE, TableName)
		a.str(unix.NFTA_CHAIN_NAME, c.Name)
		w.add(nlMessage{unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE, c.Family, a, "add chain " + c.Name})
	case verbFlush:
		a.str(unix.NFTA_RULE_TABLE, TableName)
		a.str(unix.NFTA_RULE_CHAIN, c.Name)
		w.add(nlMessage{unix.NFT_MSG_DELRULE, 0, c.Family, a, "flush chain " + c.Name})
	case verbDelete:
		a.str(unix.NFTA_CHAIN_TABLE, TableName)
		a.str(unix.NFTA_CHAIN_NAME, c.Name)
		w.add(nlMessage{unix.NFT_MSG_DELCHAIN, 0, c.Family, a, "delete chain " + c.Name})
	}
	return nil
}

func (w *netlinkWriter) rule(v verb, r *knftables.Rule) error {
	if v != verbAdd || !ours(r.Family, r.Table) || r.Index != nil || r.Handle != nil || r.Comment != nil {
		return errNotEncodable
	}
	if msg, ok := w.compiled.nextRule(objKey{r.Family, r.Chain}); ok {
		w.add(nlMessage{unix.NFT_MSG_NEWRULE, unix.NLM_F_CREATE | unix.NLM_F_APPEND, r.Family,
			copied(msg, ruleAttrs...), fmt.Sprintf("add rule %s: %s", r.Chain, r.Rule)})
		return nil
	}
	exprs, err := backendRule(r.Rule)
	if err != nil {
		return err
	}
	var a nlAttrs
	a.str(unix.NFTA_RULE_TABLE, TableName)
	a.str(unix.NFTA_RULE_CHAIN, r.Chain)
	a.nest(unix.NFTA_RULE_EXPRESSIONS, exprs)
	w.add(nlMessage{unix.NFT_MSG_NEWRULE, unix.NLM_F_CREATE | unix.NLM_F_APPEND, r.Family, a, fmt.Sprintf("add rule %s: %s", r.Chain, r.Rule)})
	return nil
}

// The rules of backend chains (render.go), the only rules the writer encodes.
var (
	namedCounterRule = regexp.MustCompile(`^counter name "([^"]+)"$`)
	dnatRule         = regexp.MustCompile(`^meta l4proto (tcp|udp) dnat (ip|ip6) to (\S+)$`)
	fwdRule          = regexp.MustCompile(`^fwd (ip|ip6) to (\S+) device "([^"]+)"$`)
)

// Registers as nft 1.0.6 allocates them for these rules.
const (
	reg1 = unix.NFT_REG_1
	reg2 = unix.NFT_REG_1 + 1
)

// backendRule encodes a backend chain's rule as nft 1.0.6 compiles it (nft --debug=netlink);
// errNotEncodable for any other rule.
func backendRule(rule string) (nlAttrs, error) {
	var exprs nlAttrs
	if rule == "meta mark set 0" {
		exprs.expr("immediate", immediate(reg1, make([]byte, 4)))
		var meta nlAttrs
		meta.u32(unix.NFTA_META_KEY, unix.NFT_META_MARK)
		meta.u32(unix.NFTA_META_SREG, reg1)
		exprs.expr("meta", meta)
		return exprs, nil
	}
	if m := namedCounterRule.FindStringSubmatch(rule); m != nil {
		var ref nlAttrs
		ref.u32(unix.NFTA_OBJREF_IMM_TYPE, unix.NFT_OBJECT_COUNTER)
		ref.str(unix.NFTA_OBJREF_IMM_NAME, m[1])
		exprs.expr("objref", ref)
		return exprs, nil
	}
	if m := dnatRule.FindStringSubmatch(rule); m != nil {
		return dnatExprs(m[1], m[2], m[3])
	}
	if m := fwdRule.FindStringSubmatch(rule); m != nil {
		return fwdExprs(m[1], m[2], m[3])
	}
	return nil, errNotEncodable
}

// immediate loads data into register reg.
func immediate(reg uint32, data []byte) nlAttrs {
	var a nlAttrs
	a.u32(unix.NFTA_IMMEDIATE_DREG, reg)
	a.value(unix.NFTA_IMMEDIATE_DATA, data)
	return a
}

// ipVersion is the family of nft's "ip" or "ip6" keyword, and whether addr is of it.
func ipVersion(keyword string, addr netip.Addr) (uint32, bool) {
	if keyword == "ip" {
		return unix.NFPROTO_IPV4, addr.Is4()
	}
	return unix.NFPROTO_IPV6, addr.Is6() && !addr.Is4In6()
}

// dnatExprs encodes "meta l4proto PROTO dnat IP to TARGET", TARGET an address or address:port.
func dnatExprs(proto, ip, target string) (nlAttrs, error) {
	addr, port := netip.Addr{}, uint16(0)
	if ap, err := netip.ParseAddrPort(target); err == nil {
		addr, port = ap.Addr(), ap.Port()
	} else if addr, err = netip.ParseAddr(target); err != nil {
		return nil, errNotEncodable
	}
	family, ok := ipVersion(ip, addr)
	if !ok {
		return nil, errNotEncodable
	}
	var exprs, meta, cmp, nat nlAttrs
	meta.u32(unix.NFTA_META_KEY, unix.NFT_META_L4PROTO)
	meta.u32(unix.NFTA_META_DREG, reg1)
	exprs.expr("meta", meta)
	cmp.u32(unix.NFTA_CMP_SREG, reg1)
	cmp.u32(unix.NFTA_CMP_OP, unix.NFT_CMP_EQ)
	cmp.value(unix.NFTA_CMP_DATA, []byte{protocolNumber[proto]})
	exprs.expr("cmp", cmp)
	exprs.expr("immediate", immediate(reg1, addr.AsSlice()))
	nat.u32(unix.NFTA_NAT_TYPE, unix.NFT_NAT_DNAT)
	nat.u32(unix.NFTA_NAT_FAMILY, family)
	nat.u32(unix.NFTA_NAT_REG_ADDR_MIN, reg1)
	if port != 0 {
		exprs.expr("immediate", immediate(reg2, binary.BigEndian.AppendUint16(nil, port)))
		nat.u32(unix.NFTA_NAT_REG_PROTO_MIN, reg2)
		nat.u32(unix.NFTA_NAT_FLAGS, unix.NF_NAT_RANGE_PROTO_SPECIFIED)
	}
	exprs.expr("nat", nat)
	return exprs, nil
}

// protocolNumber is the IP protocol of nft's inet_proto names Sluice writes.
var protocolNumber = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP}

// fwdExprs encodes "fwd IP to ADDR device DEV"; nft resolves the device to its index when it
// compiles the rule, and so does this, in the calling thread's namespace.
func fwdExprs(ip, target, device string) (nlAttrs, error) {
	addr, err := netip.ParseAddr(target)
	if err != nil {
		return nil, errNotEncodable
	}
	family, ok := ipVersion(ip, addr)
	if !ok {
		return nil, errNotEncodable
	}
	dev, err := net.InterfaceByName(device)
	if err != nil {
		return nil, errNotEncodable // nft says what is missing
	}
	var exprs, fwd nlAttrs
	exprs.expr("immediate", immediate(reg1, binary.NativeEndian.AppendUint32(nil, uint32(dev.Index))))
	exprs.expr("immediate", immediate(reg2, addr.AsSlice()))
	fwd.u32(unix.NFTA_FWD_SREG_DEV, reg1)
	fwd.u32(nftaFwdSregAddr, reg2)
	fwd.u32(nftaFwdNFProto, family)
	exprs.expr("fwd", fwd)
	return exprs, nil
}

// elements encodes ops, operations of one verb on elements of one set, in messages of at most
// maxElementsBytes of elements each.
func (w *netlinkWriter) elements(v verb, ops []operation) error {
	first := ops[0].obj.(*knftables.Element)
	name := first.Set + first.Map
	if !ours(first.Family, first.Table) || v == verbFlush {
		return errNotEncodable
	}
	set, err := w.set(first.Family, name)
	if err != nil {
		return err
	}
	typ, what := uint16(unix.NFT_MSG_NEWSETELEM), "add element "+name
	flags := uint16(unix.NLM_F_CREATE)
	if v == verbDelete {
		typ, what, flags = unix.NFT_MSG_DELSETELEM, "delete element "+name, 0
	}
	var list nlAttrs
	flush := func() {
		var a nlAttrs
		a.str(unix.NFTA_SET_ELEM_LIST_TABLE, TableName)
		a.str(unix.NFTA_SET_ELEM_LIST_SET, name)
		a.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS, list)
		w.add(nlMessage{typ, flags, first.Family, a, what})
		list = nil
	}
	for _, op := range ops {
		elem, err := set.element(op.obj.(*knftables.Element), v == verbAdd)
		if err != nil {
			return err
		}
		if len(list)+len(elem) > maxElementsBytes {
			flush()
		}
		list = append(list, elem...)
	}
	flush()
	return nil
}

// set is the definition of a set of Sluice's table of family f; errNotEncodable for a kind of
// set whose elements the writer does not encode (intervals, sets the packet path updates). An
// element added to a set with a timeout gets the set's, from the kernel, as from nft.
func (w *netlinkWriter) set(f knftables.Family, name string) (*setInfo, error) {
	k := objKey{f, name}
	if s := w.sets[k]; s != nil {
		return s, nil
	}
	msg, err := getSet(f, name)
	if err != nil {
		return nil, errNotEncodable // a set made by this same change, or gone: nft says which
	}
	s := setInfoOf(msg)
	if s.flags&(unix.NFT_SET_INTERVAL|unix.NFT_SET_EVAL|nftSetConcat) != 0 {
		return nil, errNotEncodable
	}
	w.sets[k] = s
	return s, nil
}

// getSet asks the kernel for one set of Sluice's table of family f by name (one message, not a
// dump) and returns its answer, an NFT_MSG_NEWSET message.
func getSet(f knftables.Family, name string) ([]byte, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETSET, 0)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: nfproto[f], Version: unix.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(unix.NFTA_SET_TABLE, nl.ZeroTerminated(TableName)))
	req.AddData(nl.NewRtAttr(unix.NFTA_SET_NAME, nl.ZeroTerminated(name)))
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWSET)
	if err == nil && len(msgs) != 1 {
		err = fmt.Errorf("%d answers", len(msgs))
	}
	if err != nil {
		return nil, err
	}
	return msgs[0], nil
}

// setInfoOf decodes an NFT_MSG_NEWSET message.
func setInfoOf(msg []byte) *setInfo {
	s := &setInfo{}
	for _, a := range attrsOf(msg) {
		var v uint32
		if len(a.Value) == 4 {
			v = binary.BigEndian.Uint32(a.Value)
		}
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.NFTA_SET_FLAGS:
			s.flags = v
		case unix.NFTA_SET_KEY_TYPE:
			s.keyType = v
		case unix.NFTA_SET_KEY_LEN:
			s.keyLen = v
		case unix.NFTA_SET_DATA_TYPE:
			s.dataType = v
		case unix.NFTA_SET_DATA_LEN:
			s.dataLen = v
		case unix.NFTA_SET_USERDATA:
			s.keyHostOrder = keyByteOrder(a.Value) == byteOrderHost
		}
	}
	return s
}

// nft's byte orders in a set's user data (libnftnl's NFTNL_UDATA_SET_KEYBYTEORDER, type 0, a
// 32-bit value in host order).
const (
	udataKeyByteOrder = 0
	byteOrderHost     = 1
)

// keyByteOrder reads the key's byte order from a set's user data TLVs; 0 when absent.
func keyByteOrder(b []byte) uint32 {
	for len(b) >= 2 {
		typ, n := b[0], int(b[1])
		if len(b) < 2+n {
			return 0
		}
		if typ == udataKeyByteOrder && n == 4 {
			return binary.NativeEndian.Uint32(b[2:6])
		}
		b = b[2+n:]
	}
	return 0
}

// element encodes one element of the set: its key, and when adding its data and comment.
func (s *setInfo) element(e *knftables.Element, adding bool) (nlAttrs, error) {
	key, err := s.key(e.Key)
	if err != nil {
		return nil, err
	}
	var a nlAttrs
	a.value(unix.NFTA_SET_ELEM_KEY, key)
	if adding {
		if err := s.data(&a, e.Value); err != nil {
			return nil, err
		}
		if e.Comment != nil {
			a.put(unix.NFTA_SET_ELEM_USERDATA, commentUserdata(*e.Comment))
		}
	}
	var out nlAttrs
	out.nest(unix.NFTA_LIST_ELEM, a)
	return out, nil
}

// commentUserdata is libnftnl's user data of an element's comment: type 0, a length byte, the
// string and its NUL.
func commentUserdata(c string) []byte {
	return append(append([]byte{0, byte(len(c) + 1)}, c...), 0)
}

// key encodes an element's key: each field of a concatenation padded to 4 bytes.
func (s *setInfo) key(fields []string) ([]byte, error) {
	if len(fields) == 0 || len(fields) > 5 {
		return nil, errNotEncodable
	}
	var out []byte
	for i, f := range fields {
		typ := s.keyType >> (typeBits * uint(len(fields)-1-i)) & (1<<typeBits - 1)
		b, err := datum(typ, f, s.keyHostOrder)
		if err != nil {
			return nil, err
		}
		if len(fields) > 1 {
			b = append(b, make([]byte, nlAlign(len(b))-len(b))...)
		}
		out = append(out, b...)
	}
	if len(out) != int(s.keyLen) || (len(fields) > 1 && s.keyType>>(typeBits*uint(len(fields))) != 0) {
		return nil, errNotEncodable
	}
	return out, nil
}

// data encodes an element's data into a: a verdict, a counter's name or a value.
func (s *setInfo) data(a *nlAttrs, value []string) error {
	switch {
	case s.flags&unix.NFT_SET_OBJECT != 0 && len(value) == 1:
		a.str(unix.NFTA_SET_ELEM_OBJREF, value[0])
	case s.flags&unix.NFT_SET_MAP == 0 && len(value) == 0:
	case s.flags&unix.NFT_SET_MAP != 0 && len(value) == 1 && s.dataType == unix.NFT_DATA_VERDICT:
		verdict, chain, ok := strings.Cut(value[0], " ")
		code := map[string]int32{"goto": unix.NFT_GOTO, "jump": unix.NFT_JUMP}[verdict]
		if !ok || code == 0 {
			return errNotEncodable
		}
		var v, d nlAttrs
		v.u32(unix.NFTA_VERDICT_CODE, uint32(code))
		v.str(unix.NFTA_VERDICT_CHAIN, chain)
		d.nest(unix.NFTA_DATA_VERDICT, v)
		a.nest(unix.NFTA_SET_ELEM_DATA, d)
	case s.flags&unix.NFT_SET_MAP != 0 && len(value) == 1:
		b, err := datum(s.dataType, value[0], s.dataType == typeMark)
		if err != nil || len(b) != int(s.dataLen) {
			return errNotEncodable
		}
		a.value(unix.NFTA_SET_ELEM_DATA, b)
	default:
		return errNotEncodable
	}
	return nil
}

// datum encodes one value of an nft datatype as the kernel compares it; integers in host order
// only when hostOrder (nft's integers from hashes and marks are).
func datum(typ uint32, s string, hostOrder bool) ([]byte, error) {
	switch typ {
	case typeIPv4Addr, typeIPv6Addr:
		addr, err := netip.ParseAddr(s)
		if err != nil || addr.Zone() != "" || addr.Is4() != (typ == typeIPv4Addr) || addr.Is4In6() {
			return nil, errNotEncodable
		}
		return addr.AsSlice(), nil
	case typeInetService:
		port, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return nil, errNotEncodable
		}
		return binary.BigEndian.AppendUint16(nil, uint16(port)), nil
	case typeInetProto:
		if p, ok := protocolNumber[s]; ok {
			return []byte{p}, nil
		}
	case typeMark, typeInteger:
		n, err := strconv.ParseUint(s, 0, 32)
		if err != nil || !hostOrder {
			return nil, errNotEncodable
		}
		return binary.NativeEndian.AppendUint32(nil, uint32(n)), nil
	}
	return nil, errNotEncodable
}

// batchBytes frames msgs as one nf_tables batch, sequence numbers from 1 (message i is i+1).
func batchBytes(msgs []nlMessage) []byte {
	var b []byte
	header := func(typ, flags uint16, seq uint32, family uint8, resID uint16, payload []byte) {
		n := unix.NLMSG_HDRLEN + 4 + len(payload)
		b = binary.NativeEndian.AppendUint32(b, uint32(n))
		b = binary.NativeEndian.AppendUint16(b, typ)
		b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|flags)
		b = binary.NativeEndian.AppendUint32(b, seq)
		b = binary.NativeEndian.AppendUint32(b, 0)
		b = append(b, family, unix.NFNETLINK_V0)
		b = binary.BigEndian.AppendUint16(b, resID)
		b = append(b, payload...)
		b = append(b, make([]byte, nlAlign(n)-n)...)
	}
	header(unix.NFNL_MSG_BATCH_BEGIN, 0, 0, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES, nil)
	for i, m := range msgs {
		header(unix.NFNL_SUBSYS_NFTABLES<<8|m.typ, m.flags, uint32(i+1), nfproto[m.family], 0, m.attrs)
	}
	header(unix.NFNL_MSG_BATCH_END, 0, uint32(len(msgs)+1), unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES, nil)
	return b
}

// writeChange writes cs as one nf_tables batch in the calling thread's network namespace; false,
// and why, when it cannot (an operation it does not encode, or too big a batch), for nft to.
// Written, the error is the kernel's verdict: nil when it committed every message, else the first
// it refused (the batch is then aborted: nothing changed).
func writeChange(cs *changeSet) (written bool, why string, err error) {
	msgs, err := encodeChange(cs)
	if err != nil {
		return false, err.Error(), nil // errNotEncodable, the one error encoding returns
	}
	batch := batchBytes(msgs)
	if len(batch) > maxBatchBytes {
		return false, fmt.Sprintf("a batch of %d bytes", len(batch)), nil
	}
	return true, "", writeBatch(batch, msgs)
}

// writeBatch sends batch, the framed msgs, to nf_tables and returns the kernel's verdict. A
// GETGEN request sent after the batch marks the end of its answers.
func writeBatch(batch []byte, msgs []nlMessage) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	for _, opt := range []int{unix.NETLINK_EXT_ACK, unix.NETLINK_CAP_ACK} {
		_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, opt, 1) // messages without them
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, len(batch)+(64<<10)); err != nil {
		return err
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 30}); err != nil {
		return err
	}
	kernel := &unix.SockaddrNetlink{Family: unix.AF_NETLINK}
	if err := unix.Sendto(fd, batch, 0, kernel); err != nil {
		return fmt.Errorf("sending the nf_tables batch: %w", err)
	}
	genSeq := uint32(len(msgs) + 2)
	req := generationRequest()
	req.Seq = genSeq
	if err := unix.Sendto(fd, req.Serialize(), 0, kernel); err != nil {
		return fmt.Errorf("sending the nf_tables batch: %w", err)
	}
	return batchVerdict(fd, msgs, genSeq)
}

// batchVerdict reads the answers to a batch up to the generation's (sequence genSeq): the first
// error names its message.
func batchVerdict(fd int, msgs []nlMessage, genSeq uint32) error {
	var refused error
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("reading nf_tables' answer to the batch: %w", err)
		}
		replies, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("reading nf_tables' answer to the batch: %w", err)
		}
		for _, r := range replies {
			switch {
			case r.Header.Seq == genSeq && r.Header.Type != unix.NLMSG_ERROR:
				return refused
			case r.Header.Type == unix.NLMSG_ERROR && refused == nil:
				refused = answerError(r, msgs)
			}
		}
	}
}

// answerError is the error an NLMSG_ERROR answer reports, naming the message it answers; nil for
// an acknowledgement.
func answerError(r syscall.NetlinkMessage, msgs []nlMessage) error {
	if len(r.Data) < 4 {
		return errors.New("nf_tables: a truncated answer")
	}
	errno := -int32(binary.NativeEndian.Uint32(r.Data))
	if errno == 0 {
		return nil
	}
	err := error(syscall.Errno(errno))
	if msg := extackMessage(r); msg != "" {
		err = fmt.Errorf("%w (%s)", err, msg)
	}
	if i := int(r.Header.Seq) - 1; i >= 0 && i < len(msgs) {
		return fmt.Errorf("%s: %w", msgs[i].what, err)
	}
	return err
}

// extackMessage is the kernel's text in an error answer's extended acknowledgement, if any.
func extackMessage(r syscall.NetlinkMessage) string {
	const capped = 4 + unix.NLMSG_HDRLEN // the error, then the request's header without its payload
	if r.Header.Flags&unix.NLM_F_ACK_TLVS == 0 || len(r.Data) < capped {
		return ""
	}
	attrs, err := nlattr.Parse(r.Data[capped:])
	if err != nil {
		return ""
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.NLMSGERR_ATTR_MSG {
			return string(bytes.TrimRight(a.Value, "\x00"))
		}
	}
	return ""
}
