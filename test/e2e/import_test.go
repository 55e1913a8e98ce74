package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/lab"
)

// importConns is the number of one-request connections each imported config must spread.
const importConns = 150

// TestImport converts the lab corpus of each format (internal/importer/testdata/*/lab.*, the
// lab's VIP and backends) with the binary under test, applies what it printed and checks that
// real requests reach every backend. The ipvsadm save file then round-trips: a daemon on the
// imported config lists in ipvsadm -Ln's layout what the save file says. A file that cannot be
// converted safely fails with FILE:LINE on stderr and nothing on stdout.
func TestImport(t *testing.T) {
	requireLab(t)
	t.Cleanup(func() { flush(t) })
	for _, c := range []struct{ format, file string }{
		{"keepalived", "keepalived/lab.conf"},
		{"nftlb", "nftlb/lab.json"},
		{"ipvsadm", "ipvsadm/lab.save"},
	} {
		t.Run(c.format, func(t *testing.T) {
			source := corpusFile(t, c.file)
			config := importFile(t, c.format, source)
			freshBalancer(t)
			mustSluice(t, "apply", "-f", config)
			web := netip.AddrPortFrom(netip.MustParseAddr(lab.VIP4), 80)
			res := hammer(t, workers, importConns, func() (string, error) { return httpOnce(web) })
			t.Logf("%s imported, %s: %v", c.format, web, res)
			res.requireNoFailures(t)
			requireAllBackends(t, res)
			if c.format == "ipvsadm" {
				requireIpvsadmRoundTrip(t, source, config)
			}
		})
	}
	t.Run("refused", testImportRefused)
}

// corpusFile is the path of a file of the importer's corpus.
func corpusFile(t *testing.T, name string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "internal", "importer", "testdata", name)
}

// importFile runs `sluice import FORMAT SOURCE` and stores what it printed as a config.
func importFile(t *testing.T, format, source string) string {
	t.Helper()
	r := run(t, sluiceBin, "import", format, source)
	if r.Err != nil {
		t.Fatalf("sluice import %s %s: %v\n%s", format, source, r.Err, r.Stderr)
	}
	return writeConfig(t, "imported.yaml", r.Stdout)
}

// requireIpvsadmRoundTrip starts a daemon on the config imported from an ipvsadm save file, over
// what the one-shot apply programmed, and checks that `sluice list -o ipvsadm` shows each
// service and real server of the save file as ipvsadm -Ln would, counters aside.
func requireIpvsadmRoundTrip(t *testing.T, save, config string) {
	t.Helper()
	text, err := os.ReadFile(save)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ipvsadmListing(string(text))
	if err != nil {
		t.Fatalf("%s: %v", save, err)
	}
	d := startDaemon(t, config)
	r := d.cli("list", "-o", "ipvsadm")
	if r.Err != nil {
		t.Fatalf("sluice list -o ipvsadm: %v\n%s", r.Err, r.Stderr)
	}
	t.Logf("sluice list -o ipvsadm:\n%s", r.Stdout)
	got := listedIpvsadm(r.Stdout)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sluice list -o ipvsadm, counters aside:\n%s\nwant, from %s:\n%s", strings.Join(got, "\n"), save, strings.Join(want, "\n"))
	}
}

// ipvsadmListing is what ipvsadm -Ln prints for the -A and -a lines of a save file, one space
// between fields and without the connection counters: "TCP 10.0.0.1:80 sh (sh-port) persistent
// 300", "-> 10.0.0.2:80 Masq 1". It reads the options the lab's save file uses.
func ipvsadmListing(save string) ([]string, error) {
	var out []string
	for n, line := range strings.Split(save, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		opts := map[string]string{} // option -> its value ("" for a flag)
		for i := 1; i < len(f); i++ {
			opts[f[i]] = ""
			if i+1 < len(f) && !strings.HasPrefix(f[i+1], "-") {
				opts[f[i]] = f[i+1]
				i++
			}
		}
		proto, vip := "TCP", opts["-t"]
		if udp, ok := opts["-u"]; ok {
			proto, vip = "UDP", udp
		}
		switch f[0] {
		case "-A":
			s := proto + " " + vip + " " + opts["-s"]
			if b := opts["-b"]; b != "" {
				s += " (" + b + ")"
			}
			if p, ok := opts["-p"]; ok {
				s += " persistent " + p
			}
			out = append(out, s)
		case "-a":
			forward := "Masq"
			if _, ok := opts["-g"]; ok {
				forward = "Route"
			}
			out = append(out, fmt.Sprintf("-> %s %s %s", opts["-r"], forward, opts["-w"]))
		default:
			return nil, fmt.Errorf("line %d: %q is not -A or -a", n+1, f[0])
		}
	}
	return out, nil
}

// listedIpvsadm is `sluice list -o ipvsadm` without its header, one space between fields and
// without the ActiveConn and InActConn columns.
func listedIpvsadm(listing string) []string {
	var out []string
	for i, line := range strings.Split(strings.TrimSpace(listing), "\n") {
		f := strings.Fields(line)
		if i < 3 || len(f) == 0 {
			continue
		}
		if f[0] == "->" && len(f) == 6 {
			f = f[:4]
		}
		out = append(out, strings.Join(f, " "))
	}
	return out
}

// testImportRefused: a keepalived virtual_server that tunnels in GRE (lb_kind TUN type gre) is refused through
// the CLI: a non-zero exit, FILE:LINE and the reason on stderr, nothing on stdout.
func testImportRefused(t *testing.T) {
	conf := writeConfig(t, "keepalived.conf", `virtual_server 10.91.9.100 80 {
    lb_algo rr
    lb_kind TUN type gre
    protocol TCP
    real_server 10.91.2.11 80 {
        weight 1
    }
}
`)
	r := run(t, sluiceBin, "import", "keepalived", conf)
	var exit *exec.ExitError
	if !errors.As(r.Err, &exit) || exit.ExitCode() <= 0 {
		t.Fatalf("sluice import keepalived of a GRE TUN service: %v, want a non-zero exit\nstdout: %s\nstderr: %s", r.Err, r.Stdout, r.Stderr)
	}
	if want := conf + ":3: lb_kind TUN type gre refused"; !strings.Contains(r.Stderr, want) {
		t.Errorf("stderr %q does not say %q", r.Stderr, want)
	}
	if r.Stdout != "" {
		t.Errorf("a refused import printed on stdout:\n%s", r.Stdout)
	}
	t.Logf("refused: %s", strings.TrimSpace(r.Stderr))
}
