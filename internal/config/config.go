// Package config is Sluice's declarative model: the YAML file an operator writes, decoded strictly
// and validated before anything is applied.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is the whole desired state of one balancer.
type Config struct {
	// Datapath selects the kernel datapath: "nft" (default).
	Datapath string `yaml:"datapath"`
	// Interfaces lists the devices DSR traffic arrives on; empty means every non-loopback interface.
	Interfaces []string `yaml:"interfaces"`
	// Services are the virtual services to balance.
	Services []Service `yaml:"services"`
}

// Service is one virtual service: VIP:port/protocol spread over backends.
type Service struct {
	Name      string    `yaml:"name"`
	VIP       string    `yaml:"vip"`
	Port      PortRange `yaml:"port"`
	Protocol  string    `yaml:"protocol"`
	Mode      string    `yaml:"mode"`
	Scheduler string    `yaml:"scheduler"`
	// TableSize is the Maglev table size M (a prime); 0 picks the smallest prime >= max(1021, 100 x backends).
	TableSize int `yaml:"table_size"`
	// Fallback says what happens to new flows when no backend can take them: "drop" or "reject".
	Fallback string `yaml:"fallback"`
	// FlowTimeout is how long an idle DSR flow keeps its backend (DSR has no conntrack); default 5m.
	FlowTimeout string    `yaml:"flow_timeout"`
	Backends    []Backend `yaml:"backends"`
}

// Backend is one real server behind a service.
type Backend struct {
	Address string `yaml:"address"`
	// Port is the backend's port; 0 means the port the client asked for.
	Port int `yaml:"port"`
	// Weight is the share of new flows; 0 takes no new flows but keeps existing ones. nil means 1.
	Weight *int `yaml:"weight"`
}

// PortRange is a service port or an inclusive range "first-last".
type PortRange struct{ First, Last int }

// UnmarshalYAML accepts 80 or "8000-8010".
func (p *PortRange) UnmarshalYAML(n *yaml.Node) error {
	pr, err := ParsePortRange(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: port: %w", n.Line, err)
	}
	*p = pr
	return nil
}

// MarshalYAML writes the port back the way an operator writes it.
func (p PortRange) MarshalYAML() (any, error) {
	if p.First == p.Last {
		return p.First, nil
	}
	return p.String(), nil
}

// ParsePortRange parses "80" or "8000-8010".
func ParsePortRange(s string) (PortRange, error) {
	first, last, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		last = first
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(first))
	b, err2 := strconv.Atoi(strings.TrimSpace(last))
	if err1 != nil || err2 != nil {
		return PortRange{}, fmt.Errorf("%q is not a port or a port range like 8000-8010", s)
	}
	return PortRange{First: a, Last: b}, nil
}

// String renders "80" or "8000-8010".
func (p PortRange) String() string {
	if p.First == p.Last {
		return strconv.Itoa(p.First)
	}
	return fmt.Sprintf("%d-%d", p.First, p.Last)
}

// IsRange tells whether the service covers more than one port.
func (p PortRange) IsRange() bool { return p.First != p.Last }

// WeightOrDefault returns the backend's weight, 1 when unset.
func (b Backend) WeightOrDefault() int {
	if b.Weight == nil {
		return 1
	}
	return *b.Weight
}

// Load reads, decodes and validates a config file; errors name the file, the line and the field.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
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
	var cfg Config
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&cfg); err != nil {
		return nil, prefixYAMLError(name, err)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		lines := indexLines(&root)
		for i := range errs {
			errs[i].File = name
			errs[i].Line = lines.lookup(errs[i].Path)
		}
		return nil, errs
	}
	return &cfg, nil
}

// prefixYAMLError turns yaml's "yaml: line 3: ..." into "config.yaml:3: ...".
func prefixYAMLError(name string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = name + ":" + strings.TrimPrefix(m, "line ")
		}
		return errors.New(strings.Join(msgs, "\n"))
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.HasPrefix(msg, "line ") {
		return fmt.Errorf("%s:%s", name, strings.TrimPrefix(msg, "line "))
	}
	return fmt.Errorf("%s: %s", name, msg)
}
