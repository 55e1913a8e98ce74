package nft

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// A new service brings maps whose types nft writes as its own user data (`typeof` keys) and
// service chains of many rule shapes. Rather than encode them here, the writer has nft compile
// them where its cache costs nothing: in a scratch network namespace holding only Sluice's empty
// tables, the conntrack timeout policies and the change's own new chains, maps and counters. It
// then reads the compiled maps and rules back from there over netlink and copies them, as the
// kernel holds them, into the batch it sends to the real namespace: nft's encoding, byte for
// byte, without nft reading the real ruleset (about 0.9 s at 10,000 services). Only chains the
// change itself adds are compiled; anything else that is not encoded here (a base chain, a rule
// of an existing chain, an anonymous set) still sends the whole change through nft.

// compileTimeout bounds nft's run in the scratch namespace.
const compileTimeout = 10 * time.Second

// compiled is what the scratch namespace holds after nft ran the change's new objects: the
// NEWSET answers by set, and each new chain's rules in order, as NEWRULE answers, with how many
// of them the batch has taken.
type compiled struct {
	sets   map[objKey][]byte
	chains map[objKey]bool
	rules  map[objKey][][]byte
	taken  map[objKey]int
}

// nextRule is the compiled rule that the next rule added to chain k is, and false when the chain
// is not one nft compiled.
func (c *compiled) nextRule(k objKey) ([]byte, bool) {
	if c == nil || !c.chains[k] {
		return nil, false
	}
	i := c.taken[k]
	if i >= len(c.rules[k]) {
		return nil, false
	}
	c.taken[k] = i + 1
	return c.rules[k][i], true
}

// compileNew has nft compile the change's new maps and sets and the rules of its new chains in a
// scratch namespace; nil when the change has none, errNotEncodable when it cannot.
func compileNew(cs *changeSet) (*compiled, error) {
	newChains := map[objKey]bool{}
	var script []operation
	var needed bool
	for _, op := range cs.ops {
		if op.verb != verbAdd {
			continue
		}
		switch o := op.obj.(type) {
		case *knftables.Chain:
			if o.Hook != nil || !ours(o.Family, o.Table) {
				return nil, errNotEncodable // a base chain: nft, without compiling anything first
			}
			newChains[objKey{o.Family, o.Name}] = true
			script = append(script, op)
		case *knftables.Counter:
			script = append(script, op)
		case *knftables.Map, *knftables.Set:
			script, needed = append(script, op), true
		case *knftables.Rule:
			if !newChains[objKey{o.Family, o.Chain}] {
				if _, err := backendRule(o.Rule); err != nil {
					return nil, errNotEncodable // a rule of an existing chain that only nft writes
				}
				continue
			}
			script = append(script, op)
			if _, err := backendRule(o.Rule); err != nil {
				needed = true
			}
		}
	}
	if !needed {
		return nil, nil
	}
	text, families := scratchScript(script)
	var out *compiled
	err := inScratchNetns(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), compileTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(text)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: nft in the scratch namespace: %w: %s", errNotEncodable, err, firstLines(string(bytes.TrimSpace(msg)), 5))
		}
		var err error
		out, err = readCompiled(script, families)
		return err
	})
	if out != nil {
		out.chains = newChains
	}
	return out, err
}

// scratchScript is the nft script of the scratch namespace: Sluice's tables of the families the
// operations touch, the conntrack timeout policies, then the operations.
func scratchScript(ops []operation) (string, map[knftables.Family]bool) {
	families := map[knftables.Family]bool{knftables.InetFamily: true}
	tx := knftables.NewFake("", "").NewTransaction()
	for _, op := range ops {
		families[objectFamily(op.obj)] = true
	}
	for f := range families {
		tx.Add(&knftables.Table{Family: f, Name: TableName})
	}
	var b strings.Builder
	b.WriteString(tx.String())
	for _, proto := range []string{"tcp", "udp"} {
		b.WriteString(ctTimeouts[proto].definition() + "\n")
	}
	tx = knftables.NewFake("", "").NewTransaction()
	(&changeSet{ops: ops}).replay(tx)
	b.WriteString(tx.String())
	return b.String(), families
}

// objectFamily is the family of one of the objects a scratch script adds.
func objectFamily(obj knftables.Object) knftables.Family {
	switch o := obj.(type) {
	case *knftables.Chain:
		return o.Family
	case *knftables.Counter:
		return o.Family
	case *knftables.Map:
		return o.Family
	case *knftables.Set:
		return o.Family
	case *knftables.Rule:
		return o.Family
	}
	return knftables.InetFamily
}

// readCompiled reads back, in the scratch namespace, the maps and sets of ops and the rules of
// their chains.
func readCompiled(ops []operation, families map[knftables.Family]bool) (*compiled, error) {
	c := &compiled{sets: map[objKey][]byte{}, rules: map[objKey][][]byte{}, taken: map[objKey]int{}}
	for _, op := range ops {
		switch o := op.obj.(type) {
		case *knftables.Map:
			if err := c.readSet(o.Family, o.Name); err != nil {
				return nil, err
			}
		case *knftables.Set:
			if err := c.readSet(o.Family, o.Name); err != nil {
				return nil, err
			}
		}
	}
	if err := c.onlyPlainSets(families); err != nil {
		return nil, err
	}
	for f := range families {
		msgs, err := dumpTable(f, unix.NFT_MSG_GETRULE, unix.NFT_MSG_NEWRULE, unix.NFTA_RULE_TABLE)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the compiled rules: %w", errNotEncodable, err)
		}
		for _, m := range msgs {
			k := objKey{f, nameAttr(m, unix.NFTA_RULE_CHAIN)}
			c.rules[k] = append(c.rules[k], m)
		}
	}
	return c, nil
}

// onlyPlainSets makes sure the scratch namespace holds no set but those read (a rule's anonymous
// set would not be in the copy) and that none is one the packet path updates (dynamic sets, their
// per-element expressions): those changes go through nft.
func (c *compiled) onlyPlainSets(families map[knftables.Family]bool) error {
	for f := range families {
		msgs, err := dumpTable(f, unix.NFT_MSG_GETSET, unix.NFT_MSG_NEWSET, unix.NFTA_SET_TABLE)
		if err != nil {
			return fmt.Errorf("%w: reading the compiled sets: %w", errNotEncodable, err)
		}
		for _, m := range msgs {
			name, flags := setOf(m)
			if c.sets[objKey{f, name}] == nil || flags&(unix.NFT_SET_ANONYMOUS|unix.NFT_SET_EVAL) != 0 ||
				hasAttr(m, nftaSetExpr) || hasAttr(m, nftaSetExpressions) {
				return fmt.Errorf("%w: set %s", errNotEncodable, name)
			}
		}
	}
	return nil
}

// hasAttr tells whether a message has attribute typ.
func hasAttr(msg []byte, typ uint16) bool {
	return slices.ContainsFunc(attrsOf(msg), func(a syscall.NetlinkRouteAttr) bool { return a.Attr.Type&nl.NLA_TYPE_MASK == typ })
}

// readSet reads one compiled set's definition.
func (c *compiled) readSet(f knftables.Family, name string) error {
	msg, err := getSet(f, name)
	if err != nil {
		return fmt.Errorf("%w: reading the compiled set %s: %w", errNotEncodable, name, err)
	}
	c.sets[objKey{f, name}] = msg
	return nil
}

// copied re-encodes a message the kernel answered (a set's or a rule's) as one that adds the
// same object: the attributes of keep, those nft sends, without what only the kernel assigns or
// reports (handles, a rule's position, a set's backend and element count).
func copied(msg []byte, keep ...uint16) nlAttrs {
	var a nlAttrs
	for _, attr := range attrsOf(msg) {
		if slices.Contains(keep, attr.Attr.Type&nl.NLA_TYPE_MASK) {
			a.put(attr.Attr.Type, attr.Value)
		}
	}
	return a
}

// The attributes a copied set and a copied rule keep.
var (
	setAttrs = []uint16{unix.NFTA_SET_TABLE, unix.NFTA_SET_NAME, unix.NFTA_SET_FLAGS, unix.NFTA_SET_KEY_TYPE,
		unix.NFTA_SET_KEY_LEN, unix.NFTA_SET_DATA_TYPE, unix.NFTA_SET_DATA_LEN, unix.NFTA_SET_POLICY, unix.NFTA_SET_DESC,
		unix.NFTA_SET_TIMEOUT, unix.NFTA_SET_GC_INTERVAL, unix.NFTA_SET_USERDATA, unix.NFTA_SET_OBJ_TYPE,
		nftaSetExpr, nftaSetExpressions}
	ruleAttrs = []uint16{unix.NFTA_RULE_TABLE, unix.NFTA_RULE_CHAIN, unix.NFTA_RULE_EXPRESSIONS, unix.NFTA_RULE_USERDATA}
)

// inScratchNetns runs fn on a thread of its own in a new, empty network namespace. The thread is
// never given back to the Go runtime: it ends with fn, and the namespace with it.
func inScratchNetns(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("%w: a scratch network namespace: %w", errNotEncodable, err)
			return
		}
		done <- fn()
	}()
	return <-done
}
