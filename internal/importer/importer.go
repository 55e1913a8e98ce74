// Package importer converts the configs of other layer-4 balancers (keepalived, nftlb, ipvsadm
// save files) into a Sluice config, noting what has no equivalent and refusing what cannot be
// converted safely.
package importer

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// Result is a converted config: the services and what the conversion had to leave out.
type Result struct {
	// Source says what was converted, like "keepalived /etc/keepalived/keepalived.conf".
	Source string
	// Notes are about the whole source: sections skipped, options dropped.
	Notes []string
	// Warnings are about how the source was read (FILE:LINE: what), for standard error: a
	// key repeated in nftlb's JSON.
	Warnings []string
	Services []Service
	// Omitted is what a partial import left out, in the source's order.
	Omitted []Omission
	// rendered is the YAML that finish validated.
	rendered []byte
}

// Service is one converted service and the notes on its source's options that Sluice lacks.
type Service struct {
	config.Service
	Notes []string
	// at is where the service comes from, backendAt and sorryAt where each of its backends
	// and sorry servers do (shorter when unknown): validation errors name these lines.
	at                 pos
	backendAt, sorryAt []pos
}

// Error is a source construct that cannot be converted safely, at its file and line.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// namer derives unique service names from a service's protocol, VIP and ports.
type namer map[string]bool

// maxNamePorts is the longest list of ports a name spells out: longer ones name their first
// entry and how many more there are.
const maxNamePorts = 12

// name is "tcp-10-0-0-1-80" (IPv6 colons become dashes; several ports 80_443, or 80_and4 for
// many), cut to the 32 characters a service name may hold by keeping the address's end, with
// -2, -3… added when the name is taken.
func (n namer) name(proto config.Protocol, vip config.IP, ports config.PortList) string {
	proto = proto.OrDefault()
	addr := strings.NewReplacer(".", "-", ":", "-").Replace(vip.String())
	tail := strings.ReplaceAll(ports.String(), ",", "_")
	if len(tail) > maxNamePorts {
		tail = fmt.Sprintf("%s_and%d", ports[0], len(ports)-1)
	}
	tail = "-" + tail
	room := 32 - len(proto) - 1 - len(tail)
	if len(addr) > room {
		addr = strings.TrimLeft(addr[len(addr)-room:], "-")
	}
	base := string(proto) + "-" + addr + tail
	name := base
	for i := 2; n[name]; i++ {
		suffix := "-" + strconv.Itoa(i)
		name = base[:min(len(base), 32-len(suffix))] + suffix
	}
	n[name] = true
	return name
}

// seconds writes a duration the way an operator does: 60s, 1.5s, 200ms.
func seconds(d time.Duration) config.Duration {
	if d%time.Second == 0 {
		return config.DurationOf(fmt.Sprintf("%ds", d/time.Second))
	}
	return config.DurationFrom(d)
}

// maskPrefix turns a netmask (255.255.255.0) or a prefix length (24, or 64 for IPv6) into the
// prefix length persistence_granularity takes.
func maskPrefix(text string) (int, error) {
	if n, err := strconv.Atoi(text); err == nil {
		if n < 1 || n > 128 {
			return 0, fmt.Errorf("%q is not a prefix length from 1 to 128", text)
		}
		return n, nil
	}
	mask, err := netip.ParseAddr(text)
	if err != nil || !mask.Is4() {
		return 0, fmt.Errorf("%q is not a netmask like 255.255.255.0 or a prefix length", text)
	}
	bits := mask.As4()
	v := uint32(bits[0])<<24 | uint32(bits[1])<<16 | uint32(bits[2])<<8 | uint32(bits[3])
	ones := 0
	for v&(1<<31) != 0 {
		ones++
		v <<= 1
	}
	if v != 0 || ones == 0 {
		return 0, fmt.Errorf("%q is not a contiguous netmask", text)
	}
	return ones, nil
}

// parseAddr parses a literal IP address; host names are refused, as nothing here resolves them.
func parseAddr(text string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.Trim(text, "[]"))
	switch {
	case err != nil:
		return netip.Addr{}, fmt.Errorf("%s is not an IP address (host names are not resolved: write the address)", shown(text))
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%s has a zone (%%%s): Sluice takes addresses without one (write %s)", shown(text), plain(a.Zone()), a.WithZone(""))
	}
	return a.Unmap(), nil
}

// parsePort parses a port number; service names (http) are refused like host names.
func parsePort(text string) (int, error) {
	p, err := strconv.Atoi(text)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("%s is not a port number (names from /etc/services are not resolved)", shown(text))
	}
	return p, nil
}

// shellOperators are the characters of a command that only a shell would give a meaning.
const shellOperators = "|&;<>()$`*?[]{}~\n"

// splitCommand splits a command line into argv as a shell does for a simple command: words
// separated by blanks, single and double quotes and backslashes. A command that needs a shell
// (pipes, redirections, variables, globs) is refused: keepalived 2 runs its scripts without one
// too, so such a command never did what it reads like.
func splitCommand(line string) ([]string, error) {
	var argv []string
	var word strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range line {
		switch {
		case escaped:
			word.WriteRune(r)
			escaped = false
		case quote == '\'' && r != '\'', quote == '"' && r != '"' && r != '\\':
			if quote == '"' && (r == '$' || r == '`') {
				return nil, fmt.Errorf("%q needs a shell (%q): write a script and name it", line, r)
			}
			word.WriteRune(r)
		case quote != 0 && r == quote:
			quote = 0
		case r == '\\':
			escaped, inWord = true, true
		case quote == 0 && (r == '\'' || r == '"'):
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				argv = append(argv, word.String())
				word.Reset()
				inWord = false
			}
		case strings.ContainsRune(shellOperators, r):
			return nil, fmt.Errorf("%q needs a shell (%q): write a script and name it", line, r)
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("%q has an unterminated quote or escape", line)
	}
	if inWord {
		argv = append(argv, word.String())
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("the command is empty")
	}
	return argv, nil
}

// ipvsScheduler maps an IPVS scheduler name (keepalived lb_algo, ipvsadm -s) to Sluice's, with a
// note when the meaning shifts; ok is false, with the reason in note, when it has no equivalent.
func ipvsScheduler(name string) (s config.Scheduler, note string, ok bool) {
	switch name {
	case "rr", "wrr", "lc", "wlc", "sh":
		return config.Scheduler(name), "", true
	case "mh":
		return config.SchedulerSH, "IPVS mh hashes the client's address into a Maglev table: that is Sluice's sh (Sluice's mh/maglev hashes the whole 5-tuple)", true
	case "sed", "nq":
		return config.SchedulerWLC, name + " is mapped to wlc: the fewest active flows per weight (without sed's +1 and nq's idle server first)", true
	case "dh":
		return "", "dh hashes the destination address: behind one VIP every flow goes to one server; Sluice has no equivalent (use sh or maglev)", false
	case "lblc", "lblcr":
		return "", name + " keeps destinations on a server for cache clusters (destination locality); Sluice has no equivalent (use sh or maglev)", false
	case "fo", "ovf":
		return "", name + " sends every flow to the highest-weight server that is available; Sluice has no equivalent (use sorry servers for a standby)", false
	default:
		return "", fmt.Sprintf("%q is not an IPVS scheduler Sluice knows", name), false
	}
}
