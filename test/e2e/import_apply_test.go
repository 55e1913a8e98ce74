package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestImportedConfigsApply applies every golden output of the importer's corpus
// (internal/importer/testdata/*/*.golden.yaml, whatever is there at run time) with `sluice apply
// -f` on one fresh balancer, as it is: its datapath (nft, or ebpf where the importer chose it),
// its modes and its addresses, which nothing answers (applying only programs the kernel; the
// balancer gets a default route for the datapaths that look one up). `sluice list` must then
// show every service of the file with each of its backends, and a flush ends each file. An
// importer that prints a config Sluice validates but cannot program fails here with the file and
// apply's error.
func TestImportedConfigsApply(t *testing.T) {
	requireLab(t)
	goldens, err := filepath.Glob(corpusFile(t, filepath.Join("*", "*.golden.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	if len(goldens) == 0 {
		t.Fatalf("no golden output under %s", corpusFile(t, ""))
	}
	freshBalancer(t)
	t.Cleanup(func() { flush(t) })
	routeEverywhere(t)
	for _, path := range goldens {
		name := filepath.Join(filepath.Base(filepath.Dir(path)), filepath.Base(path))
		t.Run(name, func(t *testing.T) {
			t.Cleanup(func() { flush(t) })
			applyGolden(t, path)
		})
	}
}

// routeEverywhere gives the balancer a default route (IPv4 and IPv6) out of its backend-side
// interface while t runs, where it has none: dsr, tunnel and the ebpf datapath look up the route
// to each backend when they program it, and the corpus's backends are documentation addresses
// that no lab route covers. Nothing needs to answer on that route.
func routeEverywhere(t *testing.T) {
	t.Helper()
	ns := theLab.BalancerNS()
	for _, family := range []string{"-4", "-6"} {
		if r := run(t, "ip", family, "-n", ns, "route", "show", "default"); r.Err != nil || strings.TrimSpace(r.Stdout) != "" {
			t.Logf("balancer %s default route kept: %q %v", family, strings.TrimSpace(r.Stdout), r.Err)
			continue
		}
		if r := run(t, "ip", family, "-n", ns, "route", "add", "default", "dev", balancerBackendIf); r.Err != nil {
			t.Fatalf("ip %s route add default dev %s: %v: %s", family, balancerBackendIf, r.Err, r.Stderr)
		}
		t.Cleanup(func() {
			if r := run(t, "ip", family, "-n", ns, "route", "del", "default", "dev", balancerBackendIf); r.Err != nil {
				t.Errorf("ip %s route del default dev %s: %v: %s", family, balancerBackendIf, r.Err, r.Stderr)
			}
		})
	}
}

// balancerBackendIf is the balancer's interface on the backends' bridge (docs/lab.md).
const balancerBackendIf = "eth1"

// goldenConfig is what the test reads of a golden output, decoded independently of the
// product's types: the services' names and backends.
type goldenConfig struct {
	Datapath string          `yaml:"datapath"`
	Services []goldenService `yaml:"services"`
}

type goldenService struct {
	Name     string          `yaml:"name"`
	Backends []goldenBackend `yaml:"backends"`
}

type goldenBackend struct {
	Address string `yaml:"address"`
	Port    int    `yaml:"port"`
}

// applyGolden applies one golden output and checks that `sluice list` shows each of its
// services and backends.
func applyGolden(t *testing.T, path string) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want goldenConfig
	if err := yaml.Unmarshal(text, &want); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(want.Services) == 0 {
		t.Fatalf("%s holds no service", path)
	}
	if r := sluice(t, "apply", "-f", path); r.Err != nil {
		t.Fatalf("the importer printed a config that does not apply (datapath %q): sluice apply -f %s: %v\n%s%s",
			want.Datapath, path, r.Err, r.Stdout, r.Stderr)
	}
	listed := list(t)
	for _, s := range want.Services {
		got := findService(t, listed, s.Name)
		for _, b := range s.Backends {
			if !listsBackend(got.Backends, b) {
				t.Errorf("service %s: backend %s not in sluice list: %s", s.Name, b, listedAddrs(got.Backends))
			}
		}
	}
	t.Logf("%d services (datapath %q) applied and listed", len(want.Services), want.Datapath)
}

func (b goldenBackend) String() string {
	if b.Port == 0 {
		return b.Address
	}
	return fmt.Sprintf("%s port %d", b.Address, b.Port)
}

// listsBackend says whether backends holds b: the same address (in any spelling) and, when b
// names one, the same port.
func listsBackend(backends []listedBackend, b goldenBackend) bool {
	want, err := netip.ParseAddr(b.Address)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(backends, func(l listedBackend) bool {
		got, err := netip.ParseAddr(l.Address)
		return err == nil && got == want && (b.Port == 0 || l.Port == b.Port)
	})
}

// listedAddrs is the listed backends as "address port" text, for a failure message.
func listedAddrs(backends []listedBackend) string {
	var out []string
	for _, b := range backends {
		out = append(out, fmt.Sprintf("%s port %d", b.Address, b.Port))
	}
	return "[" + strings.Join(out, ", ") + "]"
}
