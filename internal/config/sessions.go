package config

import (
	"fmt"
	"time"
)

// Bounds of the session and connection settings.
var (
	connectionBounds = bounds{0, MaxConnectionThreshold}
	quorumBounds     = bounds{0, QuorumMax}
)

// Limits of the session and connection settings.
const (
	// MaxPersistenceTimeout is the longest persistence_timeout (IPVS allows up to about 24 days;
	// a week already outlives every session a balancer should pin).
	MaxPersistenceTimeout = 7 * 24 * time.Hour
	// MaxConnectionThreshold is the largest max_connections: a backend's active flow count.
	MaxConnectionThreshold = 10_000_000
	// QuorumMax is the largest quorum: the weights of a thousand backends at MaxWeight.
	QuorumMax = 1000 * MaxWeight
	// MaxCountedBackends is the most backends of a service whose scheduler counts connections
	// (lc, wlc): the ebpf program compares them all for every new flow.
	MaxCountedBackends = 1024
)

// PersistenceOrZero is the parsed persistence_timeout, 0 when persistence is off.
func (s *Service) PersistenceOrZero() time.Duration {
	return s.PersistenceTimeout.Or(0)
}

// PersistencePrefix is the prefix length clients are grouped by for persistence, of a service
// whose VIP is IPv6 (is6) or not.
func (s *Service) PersistencePrefix(is6 bool) int {
	switch {
	case s.PersistenceGranularity > 0:
		return s.PersistenceGranularity
	case is6:
		return 128
	default:
		return 32
	}
}

// QuorumThresholds are the available weights at which the service loses quorum (below lose)
// and regains it (at gain or more); both 0 when it has no quorum.
func (s *Service) QuorumThresholds() (lose, gain int) {
	if s.Quorum <= 0 {
		return 0, 0
	}
	return max(s.Quorum-s.Hysteresis, 0), s.Quorum + s.Hysteresis
}

// validateSessions checks the scheduler's options, persistence, quorum and the connection
// thresholds of a service on a datapath; is6 tells the VIP's family when vipOK.
func (s *Service) validateSessions(at string, datapath Datapath, is6, vipOK bool, fail func(path, format string, args ...any)) {
	if s.Scheduler.CountsConnections() && datapath != DatapathEBPF {
		fail(at+".scheduler", "%s needs datapath ebpf: nftables cannot compare the backends' connection counts when it picks one (use wrr, or datapath: ebpf)", s.Scheduler)
	}
	if s.Scheduler.CountsConnections() && len(s.Backends) > MaxCountedBackends {
		fail(at+".scheduler", "%s compares every backend for each new flow: %d backends is more than %d (use maglev or wrr)", s.Scheduler, len(s.Backends), MaxCountedBackends)
	}
	if s.SHPort && s.Scheduler != SchedulerSH {
		fail(at+".sh_port", "only applies to scheduler sh, not %s", s.Scheduler)
	}
	if p := s.PersistenceTimeout; !p.IsZero() && !p.within(0, 0, 1) && !p.within(time.Second, MaxPersistenceTimeout, time.Second) {
		fail(at+".persistence_timeout", "%q is not a whole number of seconds from 1s to %s (like 300s), or 0 for off", p, MaxPersistenceTimeout)
	}
	if g := s.PersistenceGranularity; g != 0 {
		limit := 32
		if is6 {
			limit = 128
		}
		switch {
		case s.PersistenceOrZero() == 0:
			fail(at+".persistence_granularity", "only applies with a persistence_timeout")
		case vipOK && (g < 1 || g > limit):
			fail(at+".persistence_granularity", "%d is not a prefix length from 1 to %d", g, limit)
		}
	}
	if !quorumBounds.has(s.Quorum) {
		fail(at+".quorum", "%d is out of range %s", s.Quorum, quorumBounds)
	}
	switch {
	case s.Hysteresis < 0 || s.Hysteresis > s.Quorum && s.Quorum > 0:
		fail(at+".hysteresis", "%d is not within 0-%d (the quorum)", s.Hysteresis, s.Quorum)
	case s.Hysteresis > 0 && s.Quorum == 0:
		fail(at+".hysteresis", "only applies with a quorum")
	}
	for _, cmd := range []struct {
		field string
		argv  []string
	}{{"quorum_up", s.QuorumUp}, {"quorum_down", s.QuorumDown}} {
		switch {
		case len(cmd.argv) == 0:
		case s.Quorum == 0:
			fail(at+"."+cmd.field, "only applies with a quorum")
		case cmd.argv[0] == "":
			fail(at+"."+cmd.field, "needs a command, like [/usr/local/bin/notify, web, down]")
		}
	}
	for j := range s.Backends {
		s.Backends[j].validateThresholds(fmt.Sprintf("%s.backends[%d]", at, j), datapath, fail)
	}
	for j, b := range s.SorryServers {
		if b.MaxConnections != 0 || b.MinConnections != 0 {
			fail(fmt.Sprintf("%s.sorry_servers[%d].max_connections", at, j), "only applies to backends: a sorry server takes what the backends cannot")
		}
	}
}

// validateThresholds checks a backend's max_connections and min_connections.
func (b *Backend) validateThresholds(at string, datapath Datapath, fail func(path, format string, args ...any)) {
	if !connectionBounds.has(b.MaxConnections) {
		fail(at+".max_connections", "%d is out of range %s", b.MaxConnections, connectionBounds)
		return
	}
	if !connectionBounds.has(b.MinConnections) {
		fail(at+".min_connections", "%d is out of range %s", b.MinConnections, connectionBounds)
		return
	}
	switch {
	case b.MinConnections > 0 && b.MaxConnections == 0:
		fail(at+".min_connections", "only applies with max_connections")
	case b.MinConnections >= b.MaxConnections && b.MaxConnections > 0:
		fail(at+".min_connections", "%d is not below max_connections %d", b.MinConnections, b.MaxConnections)
	case b.MaxConnections > 0 && datapath != DatapathEBPF:
		fail(at+".max_connections", "needs datapath ebpf: nftables cannot count a backend's connections when it picks one")
	}
}
