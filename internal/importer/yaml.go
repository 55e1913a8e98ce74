package importer

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/config"
)

// YAML writes the result as a Sluice config: a header naming the source, the notes as
// comments, datapath ebpf when a service needs it, then the services, each under its notes.
// A result an importer returned was validated as that very YAML.
func (r *Result) YAML() ([]byte, error) {
	if r.rendered != nil {
		return r.rendered, nil
	}
	return r.render()
}

// render encodes the result as YAML (see YAML).
func (r *Result) render() ([]byte, error) {
	services := &yaml.Node{Kind: yaml.SequenceNode}
	if len(r.Services) == 0 {
		services.Style = yaml.FlowStyle
	}
	needs := ebpfNeeds{}
	next := 0 // the first omission not written
	omitted := func(i int) []string {
		var lines []string
		for ; next < len(r.Omitted) && r.Omitted[next].before <= i; next++ {
			lines = append(lines, r.Omitted[next].Lines()...)
		}
		return lines
	}
	for i, s := range r.Services {
		var n yaml.Node
		if err := n.Encode(&s.Service); err != nil {
			return nil, fmt.Errorf("service %s: %w", s.Name, err)
		}
		flowPorts(&n)
		n.HeadComment = comment(append(omitted(i), s.Notes...))
		if i == len(r.Services)-1 {
			n.FootComment = comment(omitted(i + 1))
		}
		services.Content = append(services.Content, &n)
		for _, n := range needsEBPF(&s.Service) {
			needs[n.reason] = append(needs[n.reason], s.Name+": "+n.key)
		}
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	header := append([]string{"Imported by sluice import " + r.Source + "."}, r.Notes...)
	if len(needs) > 0 {
		key := scalar("datapath")
		key.HeadComment = comment(header)
		value := scalar(string(config.DatapathEBPF))
		value.LineComment = comment([]string{needs.String()})
		root.Content = append(root.Content, key, value)
		header = nil
	}
	key := scalar("services")
	key.HeadComment = comment(header)
	root.Content = append(root.Content, key, services)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// Why a service needs the ebpf datapath.
const (
	countsConnections = "nftables cannot count connections"
	encapsulates      = "nftables cannot encapsulate"
)

// ebpfNeed is a key of a service that only the ebpf datapath programs, and why.
type ebpfNeed struct{ reason, key string }

// ebpfNeeds are the services that need the ebpf datapath ("name: key"), by reason.
type ebpfNeeds map[string][]string

// String is each reason with its services: "nftables cannot count connections: a: scheduler lc".
func (n ebpfNeeds) String() string {
	var parts []string
	for _, reason := range []string{countsConnections, encapsulates} {
		if len(n[reason]) > 0 {
			parts = append(parts, reason+": "+strings.Join(n[reason], "; "))
		}
	}
	return strings.Join(parts, ". ")
}

// needsEBPF lists the service's keys that only the ebpf datapath programs.
func needsEBPF(s *config.Service) []ebpfNeed {
	var needs []ebpfNeed
	if s.Mode == config.ModeTunnel {
		needs = append(needs, ebpfNeed{encapsulates, "mode tunnel"})
	}
	if s.Scheduler.CountsConnections() {
		return append(needs, ebpfNeed{countsConnections, "scheduler " + string(s.Scheduler)})
	}
	for _, b := range s.Backends {
		if b.MaxConnections > 0 {
			return append(needs, ebpfNeed{countsConnections, "max_connections"})
		}
	}
	return needs
}

// flowPorts writes a service's ports list on one line, as operators do: [80, 443].
func flowPorts(service *yaml.Node) {
	for i := 0; i+1 < len(service.Content); i += 2 {
		if service.Content[i].Value == "ports" {
			service.Content[i+1].Style = yaml.FlowStyle
		}
	}
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// comment is lines as a YAML comment ("# " before each), "" for none. Lines quote the input they
// cite, so what is not printable UTF-8 (a control character, a byte that is not UTF-8, which the
// YAML emitter cannot write) is escaped as Go escapes it in a string.
func comment(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	printable := make([]string, len(lines))
	for i, l := range lines {
		printable[i] = escapeUnprintable(l)
	}
	return "# " + strings.Join(printable, "\n# ")
}

// escapeUnprintable is s with its non-printable runes and invalid bytes escaped (\x80, \n).
func escapeUnprintable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return s
	}
	q := strconv.Quote(s)
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
}
