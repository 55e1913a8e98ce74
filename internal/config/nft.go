package config

// NFTOptions tune the nft datapath: the bound on what it may program, so that a config it cannot
// load is refused before anything changes instead of exhausting the machine's memory, and what it
// counts on the hot path.
type NFTOptions struct {
	// MaxElements is the most nftables elements and objects (map elements, chains, rules,
	// counters) the config may take; 0 keeps DefaultNFTMaxElements.
	MaxElements int `yaml:"max_elements,omitempty" json:"max_elements,omitempty"`
	// PacketCounters counts the packets and bytes forwarded to each backend of a nat or fullnat
	// service, a map lookup on every packet; unset is true. DSR services always count them.
	PacketCounters *bool `yaml:"packet_counters,omitempty" json:"packet_counters,omitempty"`
	// HalfOpenTimeouts gives the new flows of nat and fullnat services Sluice's conntrack timeout
	// policy (5 s for a TCP handshake or close, and for unanswered UDP), a conntrack extension
	// on every new flow; unset is true. False leaves them the namespace's conntrack timeouts.
	HalfOpenTimeouts *bool `yaml:"half_open_timeouts,omitempty" json:"half_open_timeouts,omitempty"`
}

// Limits of nft.max_elements. nft 1.0.6 holds about 1 KB per element while it loads a batch and
// the kernel about 250 bytes per element for as long as it exists; the default, about 1 million,
// holds 10,000 services of 2 backends or 1,000 of 40 with default table sizes.
const (
	DefaultNFTMaxElements = 1 << 20
	MinNFTMaxElements     = 1 << 10
	MaxNFTMaxElements     = 1 << 25
)

// NFTMaxElements is nft.max_elements, the default filled in.
func (c *Config) NFTMaxElements() int {
	if c.NFT != nil && c.NFT.MaxElements != 0 {
		return c.NFT.MaxElements
	}
	return DefaultNFTMaxElements
}

// NFTPacketCounters is nft.packet_counters, the default filled in.
func (c *Config) NFTPacketCounters() bool {
	return c.NFT == nil || c.NFT.PacketCounters == nil || *c.NFT.PacketCounters
}

// NFTHalfOpenTimeouts is nft.half_open_timeouts, the default filled in.
func (c *Config) NFTHalfOpenTimeouts() bool {
	return c.NFT == nil || c.NFT.HalfOpenTimeouts == nil || *c.NFT.HalfOpenTimeouts
}

// validateNFT checks the nft section.
func (c *Config) validateNFT(fail func(path, format string, args ...any)) {
	if c.NFT == nil {
		return
	}
	if c.Datapath == DatapathEBPF {
		fail("nft", "only applies to datapath nft, not %s", c.Datapath)
	}
	if n := c.NFT.MaxElements; n != 0 && !nftElementsBounds.has(n) {
		fail("nft.max_elements", "%d is out of range %s", n, nftElementsBounds)
	}
}
