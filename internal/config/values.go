package config

// The enumerated values of the config: each field's type, its constants, the list of the allowed
// values in the order the schema and the errors name them, and one explicit default. Validate
// fills in the defaults; OrDefault gives a field's value where an unvalidated config is read.

// Datapath is the kernel datapath that programs the services.
type Datapath string

// The datapaths.
const (
	DatapathNFT     Datapath = "nft"
	DatapathEBPF    Datapath = "ebpf"
	DefaultDatapath          = DatapathNFT
)

// Datapaths are the allowed datapaths.
var Datapaths = []Datapath{DatapathNFT, DatapathEBPF}

// OrDefault is d, or DefaultDatapath when unset.
func (d Datapath) OrDefault() Datapath { return orDefault(d, DefaultDatapath) }

// Attach is where the ebpf datapath's program runs.
type Attach string

// The attach points.
const (
	AttachTC      Attach = "tc"
	AttachXDP     Attach = "xdp"
	DefaultAttach        = AttachTC
)

// Attaches are the allowed attach points.
var Attaches = []Attach{AttachTC, AttachXDP}

// OrDefault is a, or DefaultAttach when unset.
func (a Attach) OrDefault() Attach { return orDefault(a, DefaultAttach) }

// Protocol is the transport protocol of a service.
type Protocol string

// The protocols.
const (
	ProtocolTCP     Protocol = "tcp"
	ProtocolUDP     Protocol = "udp"
	DefaultProtocol          = ProtocolTCP
)

// Protocols are the allowed protocols.
var Protocols = []Protocol{ProtocolTCP, ProtocolUDP}

// OrDefault is p, or DefaultProtocol when unset.
func (p Protocol) OrDefault() Protocol { return orDefault(p, DefaultProtocol) }

// Mode is how a service forwards: DNAT, DNAT plus SNAT, or direct server return.
type Mode string

// The forwarding modes.
const (
	ModeNAT     Mode = "nat"
	ModeFullNAT Mode = "fullnat"
	ModeDSR     Mode = "dsr"
	ModeTunnel  Mode = "tunnel" // dsr through an IPIP or GUE tunnel, to routed backends
	DefaultMode      = ModeNAT
)

// Modes are the allowed modes.
var Modes = []Mode{ModeNAT, ModeFullNAT, ModeDSR, ModeTunnel}

// OrDefault is m, or DefaultMode when unset.
func (m Mode) OrDefault() Mode { return orDefault(m, DefaultMode) }

// Scheduler is how a service picks the backend of a new flow.
type Scheduler string

// The schedulers.
const (
	SchedulerMaglev Scheduler = "maglev"
	SchedulerRR     Scheduler = "rr"
	SchedulerWRR    Scheduler = "wrr"
	SchedulerHash   Scheduler = "hash"
	SchedulerRandom Scheduler = "random"
	// SchedulerSH hashes the client's source address (and its port with sh_port) into a
	// weighted Maglev table: IPVS's sh, consistent when backends change.
	SchedulerSH Scheduler = "sh"
	// SchedulerLC and SchedulerWLC give a new flow to the backend with the fewest active flows
	// (relative to its weight for wlc); only the ebpf datapath counts them when it picks.
	SchedulerLC  Scheduler = "lc"
	SchedulerWLC Scheduler = "wlc"
	// SchedulerMH is IPVS's name of Maglev hashing: an alias of maglev.
	SchedulerMH      Scheduler = "mh"
	DefaultScheduler           = SchedulerMaglev
)

// Schedulers are the allowed schedulers.
var Schedulers = []Scheduler{SchedulerMaglev, SchedulerRR, SchedulerWRR, SchedulerHash, SchedulerRandom, SchedulerSH, SchedulerLC, SchedulerWLC, SchedulerMH}

// OrDefault is s, or DefaultScheduler when unset.
func (s Scheduler) OrDefault() Scheduler { return orDefault(s, DefaultScheduler) }

// Canonical is the scheduler an alias stands for (mh is maglev), s itself otherwise.
func (s Scheduler) Canonical() Scheduler {
	if s == SchedulerMH {
		return SchedulerMaglev
	}
	return s
}

// UsesTable tells whether the scheduler hashes flows into a Maglev table (table_size applies).
func (s Scheduler) UsesTable() bool {
	switch s.Canonical() {
	case SchedulerMaglev, SchedulerSH:
		return true
	default:
		return false
	}
}

// CountsConnections tells whether the scheduler picks by the backends' active flows.
func (s Scheduler) CountsConnections() bool { return s == SchedulerLC || s == SchedulerWLC }

// Fallback is what happens to new flows of a service when no backend can take them. Unset, a
// service without backends is refused; one with backends drops.
type Fallback string

// The fallbacks.
const (
	FallbackDrop    Fallback = "drop"
	FallbackReject  Fallback = "reject"
	FallbackSorry   Fallback = "sorry"
	DefaultFallback          = FallbackDrop
)

// Fallbacks are the allowed fallbacks.
var Fallbacks = []Fallback{FallbackDrop, FallbackReject, FallbackSorry}

// OrDefault is f, or DefaultFallback when unset.
func (f Fallback) OrDefault() Fallback { return orDefault(f, DefaultFallback) }

// CheckType is how a health check probes a backend.
type CheckType string

// The health check types.
const (
	CheckTCP         CheckType = "tcp"
	CheckHTTP        CheckType = "http"
	CheckHTTPS       CheckType = "https"
	CheckUDP         CheckType = "udp"
	CheckExec        CheckType = "exec"
	CheckSMTP        CheckType = "smtp"
	CheckICMP        CheckType = "icmp"
	CheckDNS         CheckType = "dns"
	DefaultCheckType           = CheckTCP
)

// CheckTypes are the allowed health check types.
var CheckTypes = []CheckType{CheckTCP, CheckHTTP, CheckHTTPS, CheckUDP, CheckExec, CheckSMTP, CheckICMP, CheckDNS}

// DNSQueryType is the record type a dns check asks for.
type DNSQueryType string

// The record types a dns check may ask for.
const (
	QueryA              DNSQueryType = "A"
	QueryAAAA           DNSQueryType = "AAAA"
	QueryCNAME          DNSQueryType = "CNAME"
	QueryMX             DNSQueryType = "MX"
	QueryNS             DNSQueryType = "NS"
	QueryPTR            DNSQueryType = "PTR"
	QuerySOA            DNSQueryType = "SOA"
	QuerySRV            DNSQueryType = "SRV"
	QueryTXT            DNSQueryType = "TXT"
	DefaultDNSQueryType              = QuerySOA
)

// DNSQueryTypes are the allowed dns check record types.
var DNSQueryTypes = []DNSQueryType{QueryA, QueryAAAA, QueryCNAME, QueryMX, QueryNS, QueryPTR, QuerySOA, QuerySRV, QueryTXT}

// DNSTransport is how a dns check sends its query: udp or tcp.
type DNSTransport string

// The transports of a dns check.
const (
	DNSOverUDP          DNSTransport = "udp"
	DNSOverTCP          DNSTransport = "tcp"
	DefaultDNSTransport              = DNSOverUDP
)

// DNSTransports are the allowed dns check transports.
var DNSTransports = []DNSTransport{DNSOverUDP, DNSOverTCP}

// IsHTTP tells whether the check sends an HTTP request (http or https).
func (t CheckType) IsHTTP() bool { return t == CheckHTTP || t == CheckHTTPS }

// OnFailure is what happens to a fallen backend's established flows.
type OnFailure string

// The on_failure actions.
const (
	OnFailureInhibit OnFailure = "inhibit"
	OnFailureReset   OnFailure = "reset"
	DefaultOnFailure           = OnFailureInhibit
)

// OnFailures are the allowed on_failure actions.
var OnFailures = []OnFailure{OnFailureInhibit, OnFailureReset}

// LimitAction is what happens to a new connection over one of a service's limits.
type LimitAction string

// The limit actions.
const (
	LimitDrop          LimitAction = "drop"
	LimitReset         LimitAction = "reset" // a TCP reset (UDP: dropped)
	DefaultLimitAction             = LimitDrop
)

// LimitActions are the allowed limit actions.
var LimitActions = []LimitAction{LimitDrop, LimitReset}

// OrDefault is a, or DefaultLimitAction when unset.
func (a LimitAction) OrDefault() LimitAction { return orDefault(a, DefaultLimitAction) }

// Names are the values as plain strings, for flags, completions and the schema.
func Names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func orDefault[T ~string](v, def T) T {
	if v == "" {
		return def
	}
	return v
}
