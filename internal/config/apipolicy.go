package config

import (
	"fmt"
	"reflect"
	"slices"
)

// APIPolicy is what the daemon lets a client of its TCP API change: a bearer token must not
// be worth more than the changes it is meant for. The config file, and root on the daemon's
// local socket, may change anything.
type APIPolicy struct {
	// AllowExecChecks lets the API add exec health checks or change their command. An exec check
	// runs its command as the daemon's user, root: without this the API may keep the exec checks
	// that run, and no more.
	AllowExecChecks bool `yaml:"allow_exec_checks,omitempty" json:"allow_exec_checks,omitempty"`
}

// policy is the config's APIPolicy, the zero one when unset.
func (c *Config) policy() APIPolicy {
	if c.API == nil {
		return APIPolicy{}
	}
	return *c.API
}

// APIGuard checks a change an API client makes against the running config it changes.
type APIGuard struct {
	// state is the running state section: it names a file the daemon, root, writes.
	state  State
	policy APIPolicy
	// bgp is the running bgp section: its peers' passwords and sessions are the file's.
	bgp *BGP
	// sync is the running sync section: whom the node sends its flows to, and its secret's file.
	sync *Sync
	// exec is the commands of the running exec checks, the service's and its backends', by
	// service name.
	exec map[string][][]string
	// quorumCommands are the running quorum_up and quorum_down commands, by service name.
	quorumCommands map[string][2][]string
}

// NewAPIGuard returns the guard of changes to running.
func NewAPIGuard(running *Config) APIGuard {
	g := APIGuard{state: running.State, policy: running.policy(), bgp: running.BGP.Clone(), sync: running.Sync.Clone(), exec: map[string][][]string{}, quorumCommands: map[string][2][]string{}}
	for _, s := range running.Services {
		g.quorumCommands[s.Name] = [2][]string{s.QuorumUp, s.QuorumDown}
		g.exec[s.Name] = s.execCommands()
	}
	return g
}

// execCommands lists the commands of the exec checks of s and of its backends.
func (s *Service) execCommands() [][]string {
	var list [][]string
	for _, h := range append([]*HealthCheck{s.HealthCheck}, backendChecks(s.Backends)...) {
		if h != nil && h.Type == CheckExec {
			list = append(list, h.Command)
		}
	}
	return list
}

// backendChecks lists the backends' own health checks, nil for a backend without one.
func backendChecks(backends []Backend) []*HealthCheck {
	out := make([]*HealthCheck, len(backends))
	for i := range backends {
		out[i] = backends[i].HealthCheck
	}
	return out
}

// fileOnly is the message of a change to a section only the config file sets.
const fileOnly = "only the config file sets it (edit the file, then reload)"

// CheckState lists the change next makes to the state section, which no API client may make, not
// even root on the daemon's socket: it names the file the daemon writes the running config to
// (state.path), or makes the daemon rewrite its config file (state.persist: config-file). A next
// that leaves the section out is given the running one.
func (g APIGuard) CheckState(next *Config) Errors {
	if next.State == (State{}) {
		next.State = g.state
		return nil
	}
	var errs Errors
	want, got := g.state.Resolved(), next.State.Resolved()
	if got.Persist != want.Persist {
		errs = append(errs, FieldError{Path: "state.persist", Msg: fileOnly + ": the API may leave the state section out, not change it"})
	}
	if got.Path != want.Path {
		errs = append(errs, FieldError{Path: "state.path", Msg: fileOnly + ": the API may leave the state section out, not change it"})
	}
	return errs
}

// Check lists what next changes that a client of the TCP API may not: the state section (see
// CheckState), the api, bgp and sync sections, which only the config file sets (who the node
// peers with or sends its flows to, and with which keys, is not a token's to change), and, unless it allows them, an exec
// check that does not run already (the same command for the service of the same name). Peer
// passwords next carries redacted (Redacted) are put back first.
func (g APIGuard) Check(next *Config) Errors {
	errs := g.CheckState(next)
	if next.policy() != g.policy {
		errs = append(errs, FieldError{Path: "api", Msg: fileOnly + " (or root on the daemon's socket)"})
	}
	g.unredact(next)
	if !reflect.DeepEqual(next.BGP, g.bgp) {
		errs = append(errs, FieldError{Path: "bgp", Msg: fileOnly + " (or root on the daemon's socket)"})
	}
	if !reflect.DeepEqual(next.Sync, g.sync) {
		errs = append(errs, FieldError{Path: "sync", Msg: fileOnly + " (or root on the daemon's socket)"})
	}
	if g.policy.AllowExecChecks {
		return errs
	}
	for i, s := range next.Services {
		running := g.quorumCommands[s.Name]
		for k, cmd := range [2][]string{s.QuorumUp, s.QuorumDown} {
			if len(cmd) > 0 && !slices.Equal(running[k], cmd) {
				errs = append(errs, FieldError{
					Path: fmt.Sprintf("services[%d].%s", i, [2]string{"quorum_up", "quorum_down"}[k]),
					Msg:  "a quorum command runs as root: only the config file can add or change one, unless it sets api.allow_exec_checks: true",
				})
			}
		}
		errs = append(errs, g.checkExec(i, &next.Services[i])...)
	}
	return errs
}

// checkExec lists the exec checks of service i, its own or its backends', whose command is not
// one that runs for the service of that name already.
func (g APIGuard) checkExec(i int, s *Service) Errors {
	var errs Errors
	refuse := func(path string, h *HealthCheck) {
		running := g.exec[s.Name]
		if h == nil || h.Type != CheckExec || slices.ContainsFunc(running, func(c []string) bool { return slices.Equal(c, h.Command) }) {
			return
		}
		errs = append(errs, FieldError{
			Path: path + ".health_check.command",
			Msg:  "an exec check runs its command as root: only the config file can add one or change its command, unless it sets api.allow_exec_checks: true",
		})
	}
	refuse(fmt.Sprintf("services[%d]", i), s.HealthCheck)
	for j := range s.Backends {
		refuse(fmt.Sprintf("services[%d].backends[%d]", i, j), s.Backends[j].HealthCheck)
	}
	return errs
}

// RedactedPassword stands for a BGP peer's password in what the TCP API shows: a token holder
// does not read the MD5 keys. Sent back unchanged, it means the running password.
const RedactedPassword = "(redacted)"

// Redacted returns a copy of c whose BGP peer passwords read RedactedPassword.
func (c *Config) Redacted() *Config {
	out := c.Clone()
	if out.BGP != nil {
		for i := range out.BGP.Peers {
			if out.BGP.Peers[i].Password != "" {
				out.BGP.Peers[i].Password = RedactedPassword
			}
		}
	}
	return out
}

// unredact puts back the running password of every peer of next whose password is
// RedactedPassword, so that a config read through the TCP API can be sent back as it is.
func (g APIGuard) unredact(next *Config) {
	if next.BGP == nil || g.bgp == nil {
		return
	}
	for i := range next.BGP.Peers {
		p := &next.BGP.Peers[i]
		if p.Password != RedactedPassword {
			continue
		}
		for _, running := range g.bgp.Peers {
			if running.Address == p.Address && running.Port == p.Port {
				p.Password = running.Password
			}
		}
	}
}
