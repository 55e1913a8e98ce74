// Package datapath defines what every kernel datapath of Sluice implements.
package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// Datapath programs a plan into the kernel. Apply takes the whole desired state each time and
// changes only what differs, atomically; it is idempotent. To keep the cost of a change
// independent of the size of the rest, Apply may compare the plan with what it last programmed
// instead of reading the kernel back.
type Datapath interface {
	Apply(ctx context.Context, p *plan.Plan) error
	// Resync makes the next Apply compare the plan with what the kernel holds, so that it repairs
	// what others changed.
	Resync()
	// Status reads back what the kernel holds, with counters.
	Status(ctx context.Context) ([]ServiceStatus, error)
	// ResetFlows drops the flows from a service's clients to one of its backends, established or
	// not, so that they fail fast and reconnect elsewhere; it returns how many flows were dropped.
	ResetFlows(ctx context.Context, s *plan.Service, b plan.Backend) (int, error)
	// Flush removes everything the datapath owns.
	Flush(ctx context.Context) error
}

// Watcher is a Datapath that notices at once when someone else changes what it programmed (a
// deleted table, pin or link), rather than at the next periodic resync.
type Watcher interface {
	// Watch starts watching the kernel state of the calling thread's network namespace and
	// returns; until ctx ends it calls changed, with what changed, after a change not its own
	// (a burst of changes makes one call). The caller repairs through Resync and Apply.
	Watch(ctx context.Context, changed func(what string)) error
}

// TableSharer is a Datapath whose kernel state other tables of its namespace share a version
// with (nftables' ruleset generation): a transaction of the daemon's own on one of them would
// make the datapath read its tables back, as after a stranger's change.
type TableSharer interface {
	// Beside runs commit, which makes at most one transaction, on a table of the caller's own
	// (committed: it made one), and keeps what the datapath last committed trusted across it.
	Beside(commit func() (committed bool, err error)) error
}

// StaleFlowDropper is a Datapath whose flow table hands a flow that carries no connection (a
// handshake, a closing or closed connection, an unanswered datagram flow) to a new connection
// reusing its tuple, with its backend: conntrack does.
type StaleFlowDropper interface {
	// DropStaleFlows drops those flows from a service's clients to one of its backends, keeping
	// the established ones; it returns how many it dropped.
	DropStaleFlows(ctx context.Context, s *plan.Service, b plan.Backend) (int, error)
}

// ConntrackReader is a Datapath that can tell how full the connection tracking table its flows
// live in is (the metrics export it).
type ConntrackReader interface {
	// Conntrack returns the entries the table holds and the most it can hold.
	Conntrack(ctx context.Context) (count, max uint64, err error)
}

// ServiceReader is a Datapath that can read one service back without reading all of them.
type ServiceReader interface {
	// ServiceStatus reads the named service as Status would; found is false when it is not programmed.
	ServiceStatus(ctx context.Context, name string) (status ServiceStatus, found bool, err error)
}

// ServiceStatus is one programmed service as read from the kernel.
type ServiceStatus struct {
	Name      string           `json:"name"`
	Protocol  config.Protocol  `json:"protocol"`
	VIP       string           `json:"vip"`
	Ports     string           `json:"ports"`
	Mode      config.Mode      `json:"mode"`
	Scheduler config.Scheduler `json:"scheduler"`
	// Slots is the size of the slot table new flows are spread over (0: no backend takes new flows).
	Slots    int             `json:"slots"`
	Backends []BackendStatus `json:"backends"`
	// Refused counts the new flows the service's access lists and limits refused.
	Refused Refusals `json:"refused,omitzero"`
	// Unforwarded counts the packets of the service (both ways) the datapath could not forward
	// and dropped; they count in no backend's packets (ebpf only: nft leaves forwarding to the
	// stack, which Apply and node readiness check).
	Unforwarded Unforwarded `json:"unforwarded,omitzero"`
	// SYNCookies counts what the SYN protection did (syn_protection only).
	SYNCookies SYNCookies `json:"syn_cookies,omitzero"`
	// SecondChances counts the mid-flow TCP segments without a flow that went to the backend
	// their table slot had before the table last changed (ebpf only; see docs/ha.md).
	SecondChances uint64 `json:"second_chances,omitzero"`
	// Tunnel counts what became of a mode tunnel service's packets (ebpf only; docs/tunnel.md).
	Tunnel TunnelCounts `json:"tunnel,omitzero"`
}

// TunnelCounts count a tunnel service's packets: Encapsulated were sent on to a backend; TooBig
// no longer fit the MTU once encapsulated and were answered with ICMP too big; NoSource were
// dropped for want of an outer source address towards the backend.
type TunnelCounts struct {
	Encapsulated uint64 `json:"encapsulated"`
	TooBig       uint64 `json:"too_big"`
	NoSource     uint64 `json:"no_source"`
}

// SYNCookies count a service's SYN cookies: Sent answered a SYN; Validated came back in an ACK
// that opened a connection to a backend; Rejected came back wrong, and the ACK was dropped.
type SYNCookies struct {
	Sent      uint64 `json:"sent"`
	Validated uint64 `json:"validated"`
	Rejected  uint64 `json:"rejected"`
}

// Refusals count the new flows a service refused, by the setting that refused them (named as
// in the config).
type Refusals struct {
	SourceList                       uint64 `json:"source_list,omitempty"`
	ConnectionsPerSource             uint64 `json:"connections_per_source,omitempty"`
	Connections                      uint64 `json:"connections,omitempty"`
	NewConnectionsPerSourcePerSecond uint64 `json:"new_connections_per_source_per_second,omitempty"`
	NewConnectionsPerSecond          uint64 `json:"new_connections_per_second,omitempty"`
}

// UnforwardedReader is a Datapath that counts the packets it could not forward, and can read those
// counters without reading the rest of its state.
type UnforwardedReader interface {
	// Unforwarded returns the counters of every programmed service that has any, by name.
	Unforwarded(ctx context.Context) (map[string]Unforwarded, error)
}

// Unforwarded count the packets a datapath could not forward, by reason.
type Unforwarded struct {
	// ForwardingDisabled: the receiving interface does not forward (net.ipv4.ip_forward,
	// net.ipv6.conf.all.forwarding or the interface's own forwarding sysctl is 0).
	ForwardingDisabled uint64 `json:"forwarding_disabled,omitempty"`
	// NoRoute: no route to the next hop, or a blackhole, unreachable, prohibit or local one.
	NoRoute uint64 `json:"no_route,omitempty"`
	// NoNeighbour: the next hop's neighbour (ARP/NDP) entry is not resolved (XDP dsr).
	NoNeighbour uint64 `json:"no_neighbour,omitempty"`
}

// Total is the sum over the reasons.
func (u Unforwarded) Total() uint64 { return u.ForwardingDisabled + u.NoRoute + u.NoNeighbour }

// String says how many packets went unforwarded for each reason that has any, with what to check.
func (u Unforwarded) String() string {
	var parts []string
	if u.ForwardingDisabled > 0 {
		parts = append(parts, fmt.Sprintf("%d forwarding disabled (sysctl %s / %s, or the interface's forwarding)",
			u.ForwardingDisabled, IPv4Forwarding, IPv6Forwarding))
	}
	if u.NoRoute > 0 {
		parts = append(parts, fmt.Sprintf("%d no route to the next hop", u.NoRoute))
	}
	if u.NoNeighbour > 0 {
		parts = append(parts, fmt.Sprintf("%d next hop's neighbour unresolved", u.NoNeighbour))
	}
	return strings.Join(parts, ", ")
}

// BackendStatus is one programmed backend with its counters.
type BackendStatus struct {
	Address string `json:"address"`
	Port    int    `json:"port"`
	Weight  int    `json:"weight"`
	// Share is the backend's fraction of the slot table.
	Share float64 `json:"share"`
	// Flows counts the flows (connections) sent to the backend since it was programmed.
	Flows uint64 `json:"flows"`
	// ActiveFlows is the number of flows the datapath tracks to the backend right now.
	ActiveFlows uint64 `json:"active_flows"`
	// Packets and Bytes count what the balancer forwarded from clients to the backend; nil
	// where the datapath does not count them (nft nat and fullnat with nft.packet_counters false).
	Packets *uint64 `json:"packets,omitempty"`
	Bytes   *uint64 `json:"bytes,omitempty"`
	// Connections is the active flow count the datapath picks by (lc, wlc, max_connections);
	// Overloaded tells that the backend reached max_connections and takes no new flow until it
	// is down to min_connections. Both zero where the datapath does not count.
	Connections uint64 `json:"connections,omitempty"`
	Overloaded  bool   `json:"overloaded,omitempty"`
}

// Budgeter is a Datapath that can tell, before Apply and without touching the kernel, whether a
// plan fits what it may hold, so that a config beyond it is refused with nothing changed rather
// than exhausting the machine.
type Budgeter interface {
	// Budget returns a *BudgetError when p needs more than the datapath's limit.
	Budget(p *plan.Plan) error
}

// BudgetError is a plan that needs more of a datapath's resource than its limit allows.
type BudgetError struct {
	// Field is the config key of the limit, like "nft.max_elements".
	Field string
	// What is what is counted, like "nftables elements".
	What string
	// Need is what the plan needs, Limit what the datapath may hold.
	Need, Limit int
	// Cost says what the plan would cost, like "about 2.1 GB while nft loads them".
	Cost string
	// Instead says what the operator can do instead.
	Instead string
}

func (e *BudgetError) Error() string {
	msg := fmt.Sprintf("the config needs %d %s", e.Need, e.What)
	if e.Cost != "" {
		msg += " (" + e.Cost + ")"
	}
	return msg + fmt.Sprintf(", over the limit of %d (%s); nothing was changed: %s", e.Limit, e.Field, e.Instead)
}

// Choice is the backend a datapath gives one flow (sluice which).
type Choice struct {
	Service string         `json:"service"`
	Mode    config.Mode    `json:"mode"`
	Backend netip.AddrPort `json:"backend"`
	// Tracked: the datapath already tracks the flow, so this is the backend it keeps.
	Tracked bool `json:"tracked"`
	// NATPort is the balancer-side source port of a fullnat flow, when known.
	NATPort uint16 `json:"nat_port,omitempty"`
	// Dropped says why the datapath drops a new flow instead (see SourceRefusal); no Backend then.
	Dropped string `json:"dropped,omitempty"`
}

// FlowLister is a Datapath that can list the flows it tracks for a service (sluice flows).
type FlowLister interface {
	// Flows lists the flows of the named service that filter selects, at most filter.Limit of
	// them; it reads the table as a stream, so that a table of millions costs no more memory
	// than the limit. A service the datapath does not hold is an error wrapping ErrNoService.
	Flows(ctx context.Context, service string, filter FlowFilter) (FlowList, error)
}

// ErrNoService is the error of a service the datapath does not hold.
var ErrNoService = errors.New("the datapath holds no such service")

// FlowFilter selects the flows Flows lists.
type FlowFilter struct {
	// Backend keeps the flows to this address (zero: every backend) and, when BackendPort is not
	// 0, this port.
	Backend     netip.Addr
	BackendPort uint16
	// Limit is the most flows listed (at least 1).
	Limit int
}

// Keeps tells whether the filter selects a flow to backend.
func (f FlowFilter) Keeps(backend netip.AddrPort) bool {
	return (!f.Backend.IsValid() || f.Backend == backend.Addr()) && (f.BackendPort == 0 || f.BackendPort == backend.Port())
}

// FlowList is what Flows found: up to the limit's flows, and how many it selected in all.
type FlowList struct {
	Flows []Flow `json:"flows"`
	// Total counts the flows the filter selected; those past the limit are not listed.
	Total int `json:"total"`
}

// Flow is one flow a datapath tracks for a service.
type Flow struct {
	Protocol config.Protocol `json:"protocol"`
	// Client is zero, and VIP's port 0, where the datapath keeps only a hash of the flow (nft
	// dsr over IPv6).
	Client  netip.AddrPort `json:"client"`
	VIP     netip.AddrPort `json:"vip"`
	Backend netip.AddrPort `json:"backend"`
	// State is what the flow entry tells: conntrack's TCP state (ESTABLISHED, SYN_RECV,
	// TIME_WAIT, ...) or, for UDP, REPLIED or UNREPLIED; on ebpf ACTIVE, CLOSING (its client sent
	// a FIN or RST) or IDLE (past its flow timeout); empty when the entry holds none (nft dsr).
	State string `json:"state,omitempty"`
	// ExpiresIn is the seconds until the entry times out if no packet comes (on ebpf: until it
	// stops counting as active; the LRU keeps it until its space is needed).
	ExpiresIn uint32 `json:"expires_in"`
	// NATPort is the balancer-side source port of a fullnat flow, when known.
	NATPort uint16 `json:"nat_port,omitempty"`
}

// The limits of a flow listing: the default, and the most one may ask for.
const (
	DefaultFlowLimit = 1000
	MaxFlowLimit     = 100000
)

// ParseFlowFilter reads a flow listing's backend (ADDR, ADDR:PORT or [ADDR6]:PORT; "" for every
// backend) and limit; an error names the field at fault.
func ParseFlowFilter(backend string, limit int) (FlowFilter, error) {
	f := FlowFilter{Limit: limit}
	if limit < 1 || limit > MaxFlowLimit {
		return f, &FlowFilterError{Field: "limit", Msg: fmt.Sprintf("%d is not within 1..%d", limit, MaxFlowLimit)}
	}
	if backend == "" {
		return f, nil
	}
	at, _, err := config.ParseBackendRef(backend)
	if err != nil {
		return f, &FlowFilterError{Field: "backend", Msg: fmt.Sprintf("%q is not ADDR or ADDR:PORT", backend)}
	}
	f.Backend, f.BackendPort = at.Addr(), at.Port()
	return f, nil
}

// FlowFilterError is a flow listing's backend or limit that ParseFlowFilter refuses.
type FlowFilterError struct{ Field, Msg string }

func (e *FlowFilterError) Error() string { return e.Field + ": " + e.Msg }
