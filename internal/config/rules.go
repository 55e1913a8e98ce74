package config

import (
	"fmt"
	"reflect"
	"regexp"

	"github.com/sluicelb/sluice/internal/maglev"
)

// bounds is the inclusive range of whole numbers a field may hold.
type bounds struct{ min, max int64 }

func (b bounds) has(n int) bool { return b.min <= int64(n) && int64(n) <= b.max }

func (b bounds) String() string { return fmt.Sprintf("%d-%d", b.min, b.max) }

// The ranges the validator enforces and the schema states.
var (
	portBounds        = bounds{1, 65535}
	anyPortBounds     = bounds{0, 65535} // 0: the service's (or the client's) port
	weightBounds      = bounds{0, MaxWeight}
	riseFallBounds    = bounds{1, 100}
	statusBounds      = bounds{100, 599}
	maxFlowsBounds    = bounds{MinMaxFlows, MaxMaxFlows}
	maglevSlotsBounds = bounds{MinMaglevSlots, MaxMaglevSlots}
	nftElementsBounds = bounds{MinNFTMaxElements, MaxNFTMaxElements}
	tableSizeBounds   = bounds{2, maglev.MaxSize}
	asnBounds         = bounds{1, 4294967294}
)

// Patterns of text values the schema states; the validator parses these fields.
var (
	durationPattern  = regexp.MustCompile(`^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`)
	communityPattern = regexp.MustCompile(`^` + uint16Text + `:` + uint16Text + `$`)
	rangePattern     = regexp.MustCompile(`^\s*[0-9]+\s*(-\s*[0-9]+\s*)?$`)
)

// uint16Text matches a number from 0 to 65535.
const uint16Text = `(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})`

// rule is what the validator requires of one key, as the JSON Schema states it. Enum, bounds,
// pattern and maxLength apply to each item of a list.
type rule struct {
	enum []string // the allowed values
	// def is the value an unset key takes; empty when unset means none of enum (fallback).
	def    string
	bounds *bounds
	// also is one more value taken outside bounds: 0 keeps a default, -1 turns listening off.
	also               *int64
	pattern            *regexp.Regexp
	maxLength          int
	required           bool
	minItems, maxItems int
}

func zeroOr(b bounds) rule { return rule{bounds: &b, also: new(int64)} }

func within(b bounds) rule { return rule{bounds: &b} }

// rules are the rules of the keys, by the struct type that holds them.
var rules = map[reflect.Type]map[string]rule{
	reflect.TypeFor[Config](): {
		"datapath":   {enum: Names(Datapaths), def: string(DefaultDatapath)},
		"attach":     {enum: Names(Attaches), def: string(DefaultAttach)},
		"interfaces": {pattern: interfaceName},
		"services":   {required: true},
	},
	reflect.TypeFor[EBPFSizes](): {
		"max_flows":    zeroOr(maxFlowsBounds),
		"maglev_slots": zeroOr(maglevSlotsBounds),
	},
	reflect.TypeFor[NFTOptions](): {"max_elements": zeroOr(nftElementsBounds)},
	reflect.TypeFor[State]():      {"persist": {enum: Persists, def: DefaultPersist}},
	reflect.TypeFor[Service](): {
		"name":                    {pattern: serviceName, required: true},
		"vip":                     {required: true},
		"port":                    {bounds: &portBounds},
		"ports":                   {bounds: &portBounds, minItems: 1, maxItems: MaxPortRanges},
		"protocol":                {enum: Names(Protocols), def: string(DefaultProtocol)},
		"mode":                    {enum: Names(Modes), def: string(DefaultMode)},
		"scheduler":               {enum: Names(Schedulers), def: string(DefaultScheduler)},
		"tunnel":                  {enum: Names(Tunnels), def: string(DefaultTunnel)},
		"gue_port":                zeroOr(gueBounds),
		"fallback":                {enum: Names(Fallbacks)},
		"table_size":              zeroOr(tableSizeBounds),
		"flow_timeout":            {pattern: durationPattern},
		"persistence_timeout":     {pattern: durationPattern},
		"persistence_granularity": within(bounds{0, 128}),
		"quorum":                  within(quorumBounds),
		"hysteresis":              within(quorumBounds),
		"limit_action":            {enum: Names(LimitActions), def: string(DefaultLimitAction)},
		"source_allow":            {maxItems: MaxSourceList},
		"source_deny":             {maxItems: MaxSourceList},
	},
	reflect.TypeFor[Limits](): {
		"new_connections_per_second":            zeroOr(rateBounds),
		"new_connections_per_source_per_second": zeroOr(sourceRateBounds),
		"connections":                           zeroOr(concurrentBounds),
		"connections_per_source":                zeroOr(perSourceBounds),
	},
	reflect.TypeFor[Backend](): {
		"address":         {required: true},
		"port":            within(anyPortBounds),
		"weight":          within(weightBounds),
		"max_connections": within(connectionBounds),
		"min_connections": within(connectionBounds),
	},
	reflect.TypeFor[HealthCheck](): {
		"type":           {enum: Names(CheckTypes), def: string(DefaultCheckType)},
		"port":           within(anyPortBounds),
		"interval":       {pattern: durationPattern},
		"timeout":        {pattern: durationPattern},
		"rise":           zeroOr(riseFallBounds),
		"fall":           zeroOr(riseFallBounds),
		"on_failure":     {enum: Names(OnFailures), def: string(DefaultOnFailure)},
		"method":         {enum: CheckMethods, def: DefaultCheckMethod},
		"expect_status":  within(statusBounds),
		"expect_digest":  {pattern: digestPattern},
		"helo_name":      {pattern: namePattern, maxLength: maxDNSName},
		"query_name":     {pattern: namePattern, maxLength: maxDNSName + 1},
		"query_type":     {enum: Names(DNSQueryTypes), def: string(DefaultDNSQueryType)},
		"query_protocol": {enum: Names(DNSTransports), def: string(DefaultDNSTransport)},
	},
	reflect.TypeFor[BGP](): {
		"asn":             {bounds: &asnBounds, required: true},
		"listen_port":     {bounds: &portBounds, also: &[]int64{NoListen}[0]},
		"shutdown_grace":  {pattern: durationPattern},
		"peers":           {required: true, minItems: 1, maxItems: MaxBGPPeers},
		"fullnat_sources": {maxItems: MaxFullNATSources},
	},
	reflect.TypeFor[BGPPeer](): {
		"address":        {required: true},
		"port":           within(anyPortBounds),
		"asn":            {bounds: &asnBounds, required: true},
		"hold_time":      {pattern: durationPattern},
		"password":       {maxLength: maxMD5KeyLen},
		"bfd_interval":   {pattern: durationPattern},
		"bfd_multiplier": zeroOr(bfdMultiplierBounds),
	},
	reflect.TypeFor[PathAttributes](): {
		"communities": {pattern: communityPattern, maxItems: maxCommunities},
	},
	reflect.TypeFor[Sync](): {
		"interface":            {required: true, maxLength: 15},
		"peers":                {maxItems: MaxSyncPeers},
		"port":                 zeroOr(syncPortBounds),
		"secret_file":          {required: true},
		"initial_sync_timeout": {pattern: durationPattern},
		"refresh_interval":     {pattern: durationPattern},
	},
}
