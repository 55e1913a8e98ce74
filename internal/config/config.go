// Package config is Sluice's declarative model: the YAML file an operator writes, decoded strictly
// and validated before anything is applied.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/boundedread"
)

// Config is the whole desired state of one balancer. The JSON names (REST API) are the YAML names.
type Config struct {
	// Datapath selects the kernel datapath: "nft" (default) or "ebpf".
	Datapath Datapath `yaml:"datapath,omitempty" json:"datapath,omitempty"`
	// Attach is where the ebpf datapath's program runs: "tc" (default, tcx ingress) or "xdp".
	Attach Attach `yaml:"attach,omitempty" json:"attach,omitempty"`
	// State says how the running config outlives the daemon: persist, path (see persist.go).
	State State `yaml:"state,omitempty" json:"state,omitzero"`
	// Interfaces lists the devices traffic for the VIPs arrives on (nft: dsr only; ebpf: the
	// program's interfaces); empty means every non-loopback interface that is up.
	Interfaces []string `yaml:"interfaces,omitempty" json:"interfaces,omitempty"`
	// EBPF sizes the ebpf datapath's preallocated maps; nil keeps the defaults.
	EBPF *EBPFSizes `yaml:"ebpf,omitempty" json:"ebpf,omitempty"`
	// NFT tunes the nft datapath; nil keeps the defaults.
	NFT *NFTOptions `yaml:"nft,omitempty" json:"nft,omitempty"`
	// API says what the daemon's TCP API may change; nil allows no exec check.
	API *APIPolicy `yaml:"api,omitempty" json:"api,omitempty"`
	// BGP announces the VIPs to routers; nil announces nothing.
	BGP *BGP `yaml:"bgp,omitempty" json:"bgp,omitempty"`
	// Sync replicates connection state to the other balancer nodes; nil replicates nothing.
	Sync *Sync `yaml:"sync,omitempty" json:"sync,omitempty"`
	// Services are the virtual services to balance.
	Services []Service `yaml:"services" json:"services"`
}

// EBPFSizes are the sizes of the ebpf datapath's largest maps, all preallocated in kernel
// memory; 0 keeps a size's default. They are fixed when the maps are made.
type EBPFSizes struct {
	// MaxFlows is the number of flows tracked (the flow table, and the nat replies table, each
	// an LRU of this many entries: about 280 bytes of kernel memory per flow for both).
	MaxFlows int `yaml:"max_flows,omitempty" json:"max_flows,omitempty"`
	// MaglevSlots is the room for every service's Maglev table end to end (8 bytes of kernel
	// memory each).
	MaglevSlots int `yaml:"maglev_slots,omitempty" json:"maglev_slots,omitempty"`
}

// Default and extreme sizes of the ebpf datapath's maps (bpf/constants.h holds the defaults).
const (
	DefaultMaxFlows    = 1 << 20
	DefaultMaglevSlots = 1 << 24
	MinMaxFlows        = 1 << 10
	MaxMaxFlows        = 1 << 26
	MinMaglevSlots     = 1 << 12
	MaxMaglevSlots     = 1 << 28
)

// EBPFMapSizes is the ebpf map sizes c asks for, defaults filled in.
func (c *Config) EBPFMapSizes() EBPFSizes {
	s := EBPFSizes{MaxFlows: DefaultMaxFlows, MaglevSlots: DefaultMaglevSlots}
	if c.EBPF != nil {
		s.MaxFlows = cmp.Or(c.EBPF.MaxFlows, s.MaxFlows)
		s.MaglevSlots = cmp.Or(c.EBPF.MaglevSlots, s.MaglevSlots)
	}
	return s
}

// Service is one virtual service: VIP:port/protocol spread over backends.
type Service struct {
	Name string `yaml:"name" json:"name"`
	VIP  IP     `yaml:"vip" json:"vip"`
	// Port is the service's port or range of ports; Ports lists several (one of the two is set).
	Port      Range     `yaml:"port,omitempty" json:"port,omitzero"`
	Ports     PortList  `yaml:"ports,omitempty" json:"ports,omitempty"`
	Protocol  Protocol  `yaml:"protocol,omitempty" json:"protocol,omitempty"`
	Mode      Mode      `yaml:"mode,omitempty" json:"mode,omitempty"`
	Scheduler Scheduler `yaml:"scheduler,omitempty" json:"scheduler,omitempty"`
	// FullNATSource is the address fullnat translates the clients' connections to, the source
	// the backends see (in an active/backup pair, the floating address on the backends' side);
	// unset, fullnat takes the address of the interface towards the backends.
	FullNATSource IP `yaml:"fullnat_source,omitempty" json:"fullnat_source,omitzero"`
	// Tunnel is mode tunnel's encapsulation, ipip (default) or gue; GUEPort is the UDP port of
	// gue (default 6080); TunnelSource is the outer source address (default: the address of the
	// interface towards the backend).
	Tunnel       Tunnel `yaml:"tunnel,omitempty" json:"tunnel,omitempty"`
	GUEPort      int    `yaml:"gue_port,omitempty" json:"gue_port,omitempty"`
	TunnelSource IP     `yaml:"tunnel_source,omitempty" json:"tunnel_source,omitzero"`
	// TableSize is the Maglev table size M (a prime); 0 picks maglev.DefaultSize of the backend count.
	TableSize int `yaml:"table_size,omitempty" json:"table_size,omitempty"`
	// Fallback says what happens to new flows when no backend can take them: "drop", "reject", or
	// "sorry" (send them to SorryServers).
	Fallback Fallback `yaml:"fallback,omitempty" json:"fallback,omitempty"`
	// SorryServers take new flows while no backend is up and weighted (fallback: sorry).
	SorryServers []Backend `yaml:"sorry_servers,omitempty" json:"sorry_servers,omitempty"`
	// FlowTimeout is how long an idle DSR flow keeps its backend (DSR has no conntrack); default 5m.
	FlowTimeout Duration `yaml:"flow_timeout,omitempty" json:"flow_timeout,omitzero"`
	// SHPort adds the client's source port to the sh scheduler's hash (IPVS sh-port).
	SHPort bool `yaml:"sh_port,omitempty" json:"sh_port,omitempty"`
	// PersistenceTimeout turns on session affinity (IPVS -p): every new flow from a client goes
	// to the backend of its last one while that is younger than this; "0" or unset is off.
	PersistenceTimeout Duration `yaml:"persistence_timeout,omitempty" json:"persistence_timeout,omitzero"`
	// PersistenceGranularity is the prefix length that masks the client's address for
	// persistence: clients of one /24 share a backend with 24; default 32 (IPv4), 128 (IPv6).
	PersistenceGranularity int `yaml:"persistence_granularity,omitempty" json:"persistence_granularity,omitempty"`
	// Quorum is the least total weight of the backends that are up for the service to take new
	// flows (keepalived quorum); below it the service is down: sorry servers or fallback.
	Quorum int `yaml:"quorum,omitempty" json:"quorum,omitempty"`
	// Hysteresis dampens quorum flaps: quorum is lost below quorum-hysteresis and regained at
	// quorum+hysteresis.
	Hysteresis int `yaml:"hysteresis,omitempty" json:"hysteresis,omitempty"`
	// QuorumUp and QuorumDown are commands (argv) run when the service regains or loses quorum.
	QuorumUp   []string `yaml:"quorum_up,omitempty" json:"quorum_up,omitempty"`
	QuorumDown []string `yaml:"quorum_down,omitempty" json:"quorum_down,omitempty"`
	// SYNProtection answers the service's TCP SYNs with SYN cookies: only clients that complete
	// the handshake with the balancer reach a backend.
	SYNProtection bool `yaml:"syn_protection,omitempty" json:"syn_protection,omitempty"`
	// Limits bound the service's new and concurrent connections; nil is no limit.
	Limits *Limits `yaml:"limits,omitempty" json:"limits,omitempty"`
	// LimitAction is what happens to a new connection over a limit: drop (default) or reset.
	LimitAction LimitAction `yaml:"limit_action,omitempty" json:"limit_action,omitempty"`
	// SourceAllow, when set, lists the only client prefixes (CIDR) that may open new flows;
	// SourceDeny lists prefixes that may not (it wins over SourceAllow).
	SourceAllow []Prefix `yaml:"source_allow,omitempty" json:"source_allow,omitempty"`
	SourceDeny  []Prefix `yaml:"source_deny,omitempty" json:"source_deny,omitempty"`
	// HealthCheck probes the backends; without one every backend counts as up.
	HealthCheck *HealthCheck `yaml:"health_check,omitempty" json:"health_check,omitempty"`
	// BGP are the path attributes of the VIP's announcement (bgp section); the services of one
	// VIP share them.
	BGP      *PathAttributes `yaml:"bgp,omitempty" json:"bgp,omitempty"`
	Backends []Backend       `yaml:"backends" json:"backends"`
}

// Backend is one real server behind a service.
type Backend struct {
	Address IP `yaml:"address" json:"address"`
	// Port is the backend's port; 0 means the port the client asked for.
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// Weight is the share of new flows; 0 takes no new flows but keeps existing ones. nil means 1.
	Weight *int `yaml:"weight,omitempty" json:"weight,omitempty"`
	// MaxConnections is the upper connection threshold (IPVS uthreshold): at this many active
	// flows the backend takes no new ones until it is down to MinConnections; 0 is no limit.
	MaxConnections int `yaml:"max_connections,omitempty" json:"max_connections,omitempty"`
	// MinConnections is the lower threshold (IPVS lthreshold); 0 means 3/4 of MaxConnections.
	MinConnections int `yaml:"min_connections,omitempty" json:"min_connections,omitempty"`
	// HealthCheck, when set, probes this backend instead of the service's check.
	HealthCheck *HealthCheck `yaml:"health_check,omitempty" json:"health_check,omitempty"`
}

// CheckOf is the health check that probes backend b of s: its own, else the service's; nil when
// b is not checked.
func (s *Service) CheckOf(b *Backend) *HealthCheck {
	if b.HealthCheck != nil {
		return b.HealthCheck
	}
	return s.HealthCheck
}

// ConnectionThresholds are the backend's upper and lower thresholds, the lower one resolved;
// both 0 when the backend has no limit.
func (b Backend) ConnectionThresholds() (upper, lower int) {
	if b.MaxConnections <= 0 {
		return 0, 0
	}
	if b.MinConnections > 0 {
		return b.MaxConnections, b.MinConnections
	}
	return b.MaxConnections, b.MaxConnections * 3 / 4
}

// WeightOrDefault returns the backend's weight, 1 when unset.
func (b Backend) WeightOrDefault() int {
	if b.Weight == nil {
		return 1
	}
	return *b.Weight
}

// Clone returns a deep copy of c: changing the copy never changes c.
func (c *Config) Clone() *Config {
	out := *c
	out.Interfaces = slices.Clone(c.Interfaces)
	if c.EBPF != nil {
		sizes := *c.EBPF
		out.EBPF = &sizes
	}
	if c.API != nil {
		policy := *c.API
		out.API = &policy
	}
	if c.NFT != nil {
		options := *c.NFT
		options.PacketCounters = cloneBool(c.NFT.PacketCounters)
		options.HalfOpenTimeouts = cloneBool(c.NFT.HalfOpenTimeouts)
		out.NFT = &options
	}
	out.BGP = c.BGP.Clone()
	out.Sync = c.Sync.Clone()
	out.Services = make([]Service, len(c.Services))
	for i, s := range c.Services {
		s.BGP = s.BGP.clone()
		s.Backends = cloneBackends(s.Backends)
		s.SorryServers = cloneBackends(s.SorryServers)
		s.HealthCheck = s.HealthCheck.clone()
		s.Ports = slices.Clone(s.Ports)
		s.QuorumUp, s.QuorumDown = slices.Clone(s.QuorumUp), slices.Clone(s.QuorumDown)
		s.SourceAllow, s.SourceDeny = slices.Clone(s.SourceAllow), slices.Clone(s.SourceDeny)
		if s.Limits != nil {
			l := *s.Limits
			s.Limits = &l
		}
		out.Services[i] = s
	}
	return &out
}

func cloneBackends(bs []Backend) []Backend {
	out := slices.Clone(bs)
	for i := range out {
		if w := out[i].Weight; w != nil {
			out[i].Weight = &[]int{*w}[0]
		}
		out[i].HealthCheck = out[i].HealthCheck.clone()
	}
	return out
}

// Load reads, decodes and validates a config file, a regular file of at most
// boundedread.ConfigBytes; errors name the file, the line and the field.
func Load(path string) (*Config, error) {
	data, err := boundedread.File(path, boundedread.ConfigBytes)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes and validates YAML; name prefixes the error positions (usually the file path).
func Parse(name string, data []byte) (*Config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty config", name)
		}
		return nil, prefixYAMLError(name, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, prefixYAMLError(name, err)
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document: a config is one document (remove this ---)", name, next.Line)
	}
	var cfg Config
	decodeErr := root.Decode(&cfg)
	DropEmptyLists(&cfg)
	var typeErr *yaml.TypeError
	if decodeErr != nil && !errors.As(decodeErr, &typeErr) {
		return nil, prefixYAMLError(name, decodeErr)
	}
	shape := checkShape(&root, decodeErr == nil)
	errs := shape.errs
	if typeErr != nil && len(shape.broken) == 0 {
		// The decoder saw what the shape check did not: report it by line.
		errs = append(errs, lineErrors(typeErr)...)
	}
	var lines lineIndex // indexed at the first error: a good file needs none
	for _, e := range append(cfg.Missing(), cfg.Validate()...) {
		if !covers(shape.broken, e.Path) {
			if lines == nil {
				lines = indexLines(&root)
			}
			e.Line = lines.lookup(e.Path)
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		for i := range errs {
			errs[i].File = name
		}
		slices.SortStableFunc(errs, func(a, b FieldError) int { return a.Line - b.Line })
		return nil, errs
	}
	return &cfg, nil
}

// Missing reports the fields a decoded config must hold: services, even when it is empty, so
// that a config sent as {} or null is not taken for one that removes every service.
func (c *Config) Missing() Errors {
	if c.Services == nil {
		return Errors{{Path: "services", Msg: "missing: list the services, or write services: [] for none"}}
	}
	return nil
}

// prefixYAMLError turns yaml's "yaml: line 3: ..." into "config.yaml:3: ...".
func prefixYAMLError(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.HasPrefix(msg, "line ") {
		return fmt.Errorf("%s:%s", name, strings.TrimPrefix(msg, "line "))
	}
	return fmt.Errorf("%s: %s", name, msg)
}

// lineErrors turns the decoder's "line 3: cannot unmarshal ..." messages into errors at their lines.
func lineErrors(te *yaml.TypeError) Errors {
	errs := make(Errors, len(te.Errors))
	for i, m := range te.Errors {
		var line int
		if n, _ := fmt.Sscanf(m, "line %d:", &line); n == 1 {
			m = strings.TrimSpace(m[strings.Index(m, ":")+1:])
		}
		errs[i] = FieldError{Line: line, Msg: m}
	}
	return errs
}

// cloneBool is a copy of an optional boolean, nil kept.
func cloneBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}
