package nft

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// Conntrack timeout policies shorten the life of the half-open flows of nat and fullnat services.
// A spoofed SYN flood leaves one conntrack entry per forged source; with the kernel's defaults
// (SYN_RECV 60 s, SYN_SENT 120 s, unanswered UDP 30 s) they fill the table and new legitimate
// flows are dropped. Each service chain attaches its protocol's policy to the new flows it
// balances (nft "ct timeout set", before the nat hooks confirm the entry); the other states keep
// the values the namespace had when the policy was created.
//
// knftables has no ct timeout object, so the policies are not part of the rendered state: Apply
// creates them (ensureCTTimeouts) before the transaction whose rules name them. A table deleted
// by someone else loses them with it; the next Apply creates them again.

// ctTimeout is one policy: its object's name, protocol and state timeouts in seconds.
type ctTimeout struct {
	name, protocol string
	policy         []stateTimeout
}

type stateTimeout struct {
	state   string
	seconds int
}

// ctTimeouts are the policies, by protocol. 5 s leave a client's SYN retransmissions (1 s, 3 s)
// time to be answered, and a close or an unanswered datagram flow none to be reused.
var ctTimeouts = map[string]ctTimeout{
	"tcp": {name: "halfopen-tcp", protocol: "tcp", policy: []stateTimeout{{"syn_sent", 5}, {"syn_recv", 5}, {"close", 5}}},
	"udp": {name: "unreplied-udp", protocol: "udp", policy: []stateTimeout{{"unreplied", 5}}},
}

// newFlowRules are the rules of a nat or fullnat service chain that set up the conntrack entry of
// a new flow: its protocol's timeout policy (unless nft.half_open_timeouts is false) and, when
// the node replicates its flows, the events its TCP connection raises (replicatedEvents).
func newFlowRules(s *plan.Service) []string {
	var rules []string
	if !keepsKernelTimeouts(s) {
		rules = append(rules, ctTimeoutRule(string(s.Protocol)))
	}
	if limitsEvents(s) {
		rules = append(rules, "ct event set "+replicatedEvents)
	}
	return rules
}

// keepsKernelTimeouts tells whether a service's new flows go without the timeout policy: those
// of a nat or fullnat service under nft.half_open_timeouts false.
func keepsKernelTimeouts(s *plan.Service) bool {
	return s.KernelTimeouts && s.Mode != config.ModeDSR
}

// limitsEvents tells whether a service's new flows raise only replicatedEvents: the TCP ones
// of a nat or fullnat service on a node that replicates its flows.
func limitsEvents(s *plan.Service) bool {
	return s.Replicated && s.Protocol == config.ProtocolTCP && s.Mode != config.ModeDSR
}

// replicatedEvents are the conntrack events a replicated TCP connection raises: the packet that
// makes it established (assured, which comes with its state) and its end. conntrackd replicates
// nothing else of it (its filter passes ESTABLISHED, CLOSE_WAIT, TIME_WAIT and CLOSED), and the
// kernel no longer builds the other six netlink messages of each connection for conntrackd to
// read and drop. A peer then holds an established replica until the end: a node taking over a
// closing connection sees its last segments pass (conntrack is liberal under sync) and its own
// conntrack follows the close.
const replicatedEvents = "assured,destroy"

// ctTimeoutRule is the rule of a service chain that gives its new flows its protocol's policy.
func ctTimeoutRule(protocol string) string {
	return fmt.Sprintf("ct timeout set %q", ctTimeouts[protocol].name)
}

// definition is the policy's object as nft reads it, in Sluice's inet table.
func (c ctTimeout) definition() string {
	states := make([]string, len(c.policy))
	for i, p := range c.policy {
		states[i] = fmt.Sprintf("%s : %d", p.state, p.seconds)
	}
	return fmt.Sprintf("add ct timeout %s %s %s { protocol %s; l3proto ip; policy = { %s }; }",
		knftables.InetFamily, TableName, c.name, c.protocol, strings.Join(states, ", "))
}

// ensureCTTimeouts creates Sluice's inet table and its policies where they are missing, and tells
// whether it ran a transaction to do so. It looks over netlink first (a dump of the table's ct
// timeout objects), so that an Apply that finds them runs no transaction and leaves the ruleset's
// generation alone.
func ensureCTTimeouts(ctx context.Context) (bool, error) {
	have, err := ctTimeoutNames()
	if err != nil {
		return false, err
	}
	script := []string{fmt.Sprintf("add table %s %s", knftables.InetFamily, TableName)}
	for _, proto := range []string{"tcp", "udp"} {
		if c := ctTimeouts[proto]; !have[c.name] {
			script = append(script, c.definition())
		}
	}
	if len(script) == 1 {
		return false, nil
	}
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(strings.Join(script, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("creating the conntrack timeout policies: %w: %s", err, bytes.TrimSpace(out))
	}
	return true, nil
}

// ctTimeoutNames are those of Sluice's ct timeout objects that its inet table holds. Each is
// asked for by name, which the kernel finds without walking the table's objects (a dump would walk
// every counter too: tens of thousands at 10,000 services).
func ctTimeoutNames() (map[string]bool, error) {
	names := map[string]bool{}
	for _, c := range ctTimeouts {
		req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETOBJ, 0)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_INET, Version: unix.NFNETLINK_V0})
		req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_TABLE, nl.ZeroTerminated(TableName)))
		req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_NAME, nl.ZeroTerminated(c.name)))
		req.AddData(nl.NewRtAttr(unix.NFTA_OBJ_TYPE, binary.BigEndian.AppendUint32(nil, unix.NFT_OBJECT_CT_TIMEOUT)))
		msgs, err := req.Execute(unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWOBJ)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return nil, fmt.Errorf("reading the conntrack timeout policy %s: %w", c.name, err)
		case len(msgs) > 0:
			names[c.name] = true
		}
	}
	return names, nil
}
