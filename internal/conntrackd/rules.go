package conntrackd

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"sigs.k8s.io/knftables"
)

// conntrackd's protocol authenticates nothing: whoever reaches its port can write entries into
// the kernel's conntrack table. Sluice's own table accepts the port only on the sync link from
// the configured peers (with a group: from the sync address's subnet, to the group) and drops
// the rest, counted.
const (
	// RulesTable is the nftables table (family inet) of the rules guarding conntrackd's port.
	RulesTable = "sluice-sync"
	// ForeignCounter is the named counter of the packets dropped on the way to the port.
	ForeignCounter = "foreign"
	rulesChain     = "input"
)

// guard is what the rules accept: senders on the sync link's interface to conntrackd's port.
type guard struct {
	iface   string
	port    int
	sources []netip.Prefix
	// group is the destination of multicast messages (invalid for unicast).
	group netip.Addr
}

// rules are the guard's rule lines, in order.
func (g guard) rules() []string {
	v := "ip"
	if !g.sources[0].Addr().Is4() {
		v = "ip6"
	}
	src := make([]string, len(g.sources))
	for i, p := range g.sources {
		src[i] = p.String()
		if p.IsSingleIP() {
			src[i] = p.Addr().String()
		}
	}
	accept := fmt.Sprintf("iifname %q %s saddr { %s }", g.iface, v, strings.Join(src, ", "))
	if g.group.IsValid() {
		accept += fmt.Sprintf(" %s daddr %s", v, g.group)
	}
	return []string{
		fmt.Sprintf("%s udp dport %d accept", accept, g.port),
		fmt.Sprintf("udp dport %d counter name %q drop", g.port, ForeignCounter),
	}
}

// transaction replaces the table's content by g's rules; nil g deletes the table.
func (g *guard) transaction(nft knftables.Interface) *knftables.Transaction {
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("Sluice: conntrackd's port, open to the sync peers only")})
	if g == nil {
		tx.Delete(&knftables.Table{})
		return tx
	}
	tx.Flush(&knftables.Table{})
	tx.Add(&knftables.Counter{Name: ForeignCounter, Comment: knftables.PtrTo("dropped on the way to conntrackd's port")})
	tx.Add(&knftables.Chain{
		Name: rulesChain, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.InputHook),
		Priority: knftables.PtrTo(knftables.FilterPriority + " - 10"),
	})
	for _, r := range g.rules() {
		tx.Add(&knftables.Rule{Chain: rulesChain, Rule: r})
	}
	return tx
}

// applyGuard installs g (nil removes the table) in the calling thread's network namespace.
func applyGuard(ctx context.Context, g *guard) error {
	nft, err := knftables.New(knftables.InetFamily, RulesTable)
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := nft.Run(ctx, g.transaction(nft)); err != nil {
		return fmt.Errorf("guarding conntrackd's port with table inet %s: %w", RulesTable, err)
	}
	return nil
}

// foreignDrops reads the counter of the packets dropped on the way to conntrackd's port.
func foreignDrops(ctx context.Context) (uint64, error) {
	nft, err := knftables.New(knftables.InetFamily, RulesTable)
	if err != nil {
		return 0, err
	}
	counters, err := nft.ListCounters(ctx)
	if err != nil {
		return 0, err
	}
	for _, c := range counters {
		if c.Name == ForeignCounter && c.Packets != nil {
			return *c.Packets, nil
		}
	}
	return 0, fmt.Errorf("table inet %s has no counter %s", RulesTable, ForeignCounter)
}
