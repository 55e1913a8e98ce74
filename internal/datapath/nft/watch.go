package nft

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/nlattr"
)

// Anyone with CAP_NET_ADMIN in the namespace can change Sluice's tables (`nft delete table inet
// sluice` stops every service). Watch follows nf_tables' notifications (netlink group
// NFNLGRP_NFTABLES) and reports a transaction that touched Sluice's tables as soon as it is not
// accounted for by what Sluice committed. A transaction's notifications end with NFT_MSG_NEWGEN,
// which carries the generation it made and the process that made it; Apply records the generation
// at which the tables are as it committed them, so a transaction whose generation is not after
// that one is Sluice's own, or was read back since. Once another program has committed anything
// in the namespace, Apply records no generation until a resync has read the tables back, and
// Sluice's own changes are reported too until then: the resync they cause reads the tables once.
// Notifications lost to an overflow of the socket (a transaction of Sluice's own with tens of
// thousands of elements overflows it) are judged by the ruleset's generation read after the loss:
// when Sluice's commits account for it, every lost notification was of Sluice's own transactions.

var _ datapath.Watcher = (*Datapath)(nil)

const (
	// watchSettle is how long a report waits for more transactions, so that a burst (a script
	// of nft commands) makes one report and one repair.
	watchSettle = 150 * time.Millisecond
	// watchBuffer is the receive buffer of the notification socket; notifications lost to an
	// overflow are reported as a change.
	watchBuffer = 4 << 20
)

// Watch starts following the ruleset of the calling thread's network namespace; see
// datapath.Watcher.
func (d *Datapath) Watch(ctx context.Context, changed func(what string)) error {
	return d.watch(ctx, changed, watchBuffer)
}

// watch is Watch with a notification socket of buffer bytes.
func (d *Datapath) watch(ctx context.Context, changed func(what string), buffer int) error {
	s, err := nl.Subscribe(unix.NETLINK_NETFILTER, unix.NFNLGRP_NFTABLES)
	if err != nil {
		return fmt.Errorf("subscribing to nftables notifications: %w", err)
	}
	if err := s.SetReceiveBufferSize(buffer, true); err != nil {
		s.Close()
		return fmt.Errorf("sizing the nftables notification socket: %w", err)
	}
	// The generation is asked on a socket of this namespace: the reading goroutine's thread may
	// be in another.
	gens, err := nl.Subscribe(unix.NETLINK_NETFILTER)
	if err != nil {
		s.Close()
		return fmt.Errorf("opening a socket for the ruleset's generation: %w", err)
	}
	w := &watcher{d: d, ctx: ctx, changed: changed, generations: gens}
	go func() {
		<-ctx.Done()
		s.Close() // ends the Receive in progress
		gens.Close()
	}()
	go w.read(s)
	return nil
}

// watcher turns nf_tables' notifications into reports of changes made by others.
type watcher struct {
	d           *Datapath
	ctx         context.Context
	changed     func(what string)
	generations *nl.NetlinkSocket // asks the watched namespace's ruleset generation

	mu      sync.Mutex
	pending []transaction // touched Sluice's tables, not judged yet
}

// transaction is one nf_tables transaction that touched Sluice's tables.
type transaction struct {
	gen     uint32 // the generation it made (lost: the ruleset's after the loss); 0: not known
	lost    bool   // notifications were lost: this stands for every transaction up to gen
	by      string // the process that committed it
	changes []change
	more    int // changes beyond watchKept
}

// change is one notification's change to one of Sluice's tables.
type change struct {
	kind    objectKind
	family  knftables.Family
	name    string // of the object in the table; "" for the table
	deleted bool
}

func (c change) String() string {
	what := fmt.Sprintf("%s %s %s", c.kind, c.family, TableName)
	if c.name != "" {
		what += " " + c.name
	}
	if c.deleted {
		return what + " deleted"
	}
	return what + " added"
}

const (
	// watchKept is how many distinct changes a transaction keeps; watchShown how many it names.
	watchKept  = 256
	watchShown = 4
)

func (t *transaction) note(c change) {
	switch {
	case slices.Contains(t.changes, c):
	case len(t.changes) < watchKept:
		t.changes = append(t.changes, c)
	default:
		t.more++
	}
}

// String names the transaction's changes, the biggest first, leaving out the deletions a deleted
// table implies.
func (t transaction) String() string {
	if t.lost {
		return "nftables notifications lost (receive buffer overflow)"
	}
	var shown []change
	for _, c := range t.changes {
		if c.kind == tableKind || !c.deleted || !slices.Contains(t.changes, change{kind: tableKind, family: c.family, deleted: true}) {
			shown = append(shown, c)
		}
	}
	slices.SortStableFunc(shown, func(a, b change) int { return int(a.kind) - int(b.kind) })
	more := t.more
	if len(shown) > watchShown {
		more += len(shown) - watchShown
		shown = shown[:watchShown]
	}
	names := make([]string, len(shown))
	for i, c := range shown {
		names[i] = c.String()
	}
	what := strings.Join(names, ", ")
	if more > 0 {
		what += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%s at generation %d: %s", t.by, t.gen, what)
}

// read receives notifications until the socket is closed, collecting each transaction's changes
// to Sluice's tables.
func (w *watcher) read(s *nl.NetlinkSocket) {
	var t transaction
	for {
		msgs, _, err := s.Receive()
		switch {
		case w.ctx.Err() != nil:
			return
		case errors.Is(err, unix.ENOBUFS):
			t = transaction{}
			w.add(transaction{lost: true, gen: generationOn(w.generations)})
			continue
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			w.d.log.Error("nft: no longer watching the ruleset; changes made by others wait for the periodic resync", "err", err)
			return
		}
		for _, m := range msgs {
			if gen, by, ok := generationOf(m); ok {
				if len(t.changes) > 0 {
					t.gen, t.by = gen, by
					w.add(t)
				}
				t = transaction{}
			} else if c, ok := changeOf(m); ok {
				t.note(c)
			}
		}
	}
}

// add queues a transaction; the first of a burst schedules the judgement.
func (w *watcher) add(t transaction) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(w.pending, t)
	if len(w.pending) == 1 {
		time.AfterFunc(watchSettle, w.judge)
	}
}

// judge reports the queued transactions that what Sluice committed does not account for.
func (w *watcher) judge() {
	w.mu.Lock()
	pending := w.pending
	w.pending = nil
	w.mu.Unlock()
	var others []string
	for _, t := range pending {
		if t.gen == 0 || !w.d.accountsFor(t.gen) {
			others = append(others, t.String())
		}
	}
	if len(others) > 0 && w.ctx.Err() == nil {
		w.changed(strings.Join(others, "; "))
	}
}

// accountsFor tells whether the tables, as Sluice last committed or read them, already include
// the transaction that made generation gen. It waits for an Apply in progress, which records the
// generation its own transaction made.
func (d *Datapath) accountsFor(gen uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.generation != 0 && int32(gen-d.generation) <= 0 || slices.Contains(d.own, gen)
}

// generationOf decodes an NFT_MSG_NEWGEN notification: the generation and who committed it.
func generationOf(m syscall.NetlinkMessage) (uint32, string, bool) {
	if m.Header.Type != unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWGEN {
		return 0, "", false
	}
	attrs, ok := attributesOf(m)
	if !ok || len(attrs[unix.NFTA_GEN_ID]) != 4 {
		return 0, "", false
	}
	by := "a process"
	if name := attrs[unix.NFTA_GEN_PROC_NAME]; len(name) > 0 {
		by = cString(name)
	}
	if pid := attrs[unix.NFTA_GEN_PROC_PID]; len(pid) == 4 {
		by += fmt.Sprintf(" (pid %d)", binary.BigEndian.Uint32(pid))
	}
	return binary.BigEndian.Uint32(attrs[unix.NFTA_GEN_ID]), by, true
}

// objectKind is what a notification changes, the biggest first.
type objectKind int

const (
	tableKind objectKind = iota
	chainKind
	setKind
	objKind
	ruleKind
	elementsKind
)

func (k objectKind) String() string {
	return [...]string{"table", "chain", "set", "object", "rule in chain", "elements of set"}[k]
}

// notifications maps each notification that changes an object to its kind, whether it deletes
// and the attribute holding the object's name (each carries its table's name as attribute 1).
var notifications = map[uint16]struct {
	kind    objectKind
	deleted bool
	name    uint16
}{
	unix.NFT_MSG_NEWTABLE:   {tableKind, false, 0},
	unix.NFT_MSG_DELTABLE:   {tableKind, true, 0},
	unix.NFT_MSG_NEWCHAIN:   {chainKind, false, unix.NFTA_CHAIN_NAME},
	unix.NFT_MSG_DELCHAIN:   {chainKind, true, unix.NFTA_CHAIN_NAME},
	unix.NFT_MSG_NEWSET:     {setKind, false, unix.NFTA_SET_NAME},
	unix.NFT_MSG_DELSET:     {setKind, true, unix.NFTA_SET_NAME},
	unix.NFT_MSG_NEWOBJ:     {objKind, false, unix.NFTA_OBJ_NAME},
	unix.NFT_MSG_DELOBJ:     {objKind, true, unix.NFTA_OBJ_NAME},
	unix.NFT_MSG_NEWRULE:    {ruleKind, false, unix.NFTA_RULE_CHAIN},
	unix.NFT_MSG_DELRULE:    {ruleKind, true, unix.NFTA_RULE_CHAIN},
	unix.NFT_MSG_NEWSETELEM: {elementsKind, false, unix.NFTA_SET_ELEM_LIST_SET},
	unix.NFT_MSG_DELSETELEM: {elementsKind, true, unix.NFTA_SET_ELEM_LIST_SET},
}

// changeOf decodes a notification that changed one of Sluice's tables; false for any other.
func changeOf(m syscall.NetlinkMessage) (change, bool) {
	if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return change{}, false
	}
	n, ok := notifications[m.Header.Type&0xff]
	if !ok || len(m.Data) < nl.SizeofNfgenmsg {
		return change{}, false
	}
	family, ok := tableFamily(m.Data[0])
	if !ok {
		return change{}, false
	}
	attrs, ok := attributesOf(m)
	if !ok || cString(attrs[1]) != TableName {
		return change{}, false
	}
	c := change{kind: n.kind, family: family, deleted: n.deleted}
	if n.name != 0 {
		c.name = cString(attrs[n.name])
	}
	return c, true
}

func cString(b []byte) string { return string(bytes.TrimRight(b, "\x00")) }

// tableFamily maps an nfnetlink family to the family of one of Sluice's tables.
func tableFamily(proto uint8) (knftables.Family, bool) {
	for f, p := range nfproto {
		if p == proto {
			return f, true
		}
	}
	return "", false
}

// attributesOf returns the top-level attributes of an nf_tables message by type.
func attributesOf(m syscall.NetlinkMessage) (map[uint16][]byte, bool) {
	if len(m.Data) < nl.SizeofNfgenmsg {
		return nil, false
	}
	attrs, err := nlattr.Parse(m.Data[nl.SizeofNfgenmsg:])
	if err != nil {
		return nil, false
	}
	out := make(map[uint16][]byte, len(attrs))
	for _, a := range attrs {
		out[a.Attr.Type&nl.NLA_TYPE_MASK] = a.Value
	}
	return out, true
}
