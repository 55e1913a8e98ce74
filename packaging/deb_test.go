// Package packaging_test builds the .deb with make deb, inspects it, installs it into a scratch
// root and runs the installed sluice.
package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/testutil"
)

func TestDeb(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and a package: not with -short")
	}
	for _, tool := range []string{"make", "dpkg", "dpkg-deb", "file"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Missing(t, "needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	version := strings.TrimSpace(run(t, "make", "-s", "-C", "..", "version"))
	run(t, "make", "-s", "-C", "..", "deb", "DEBDIR="+dir, "BIN="+filepath.Join(dir, "sluice"))
	debs, _ := filepath.Glob(filepath.Join(dir, "sluice_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb made %v, want one sluice_*.deb", debs)
	}
	deb := debs[0]

	if out := run(t, "file", filepath.Join(dir, "sluice")); !strings.Contains(out, "statically linked") || !strings.Contains(out, ", stripped") {
		t.Errorf("the binary is not static and stripped: %s", out)
	}
	// Depends names what apt-get install must pull on Debian 12; util-linux (nsenter) is Essential.
	for field, want := range map[string]string{"Package": "sluice", "Depends": "nftables, iproute2, conntrack", "Recommends": "conntrackd",
		"Architecture": run(t, "dpkg", "--print-architecture"), "Section": "net", "Priority": "optional"} {
		if got := run(t, "dpkg-deb", "-f", deb, field); strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("control %s: %q, want %q", field, got, want)
		}
	}
	debver := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Version"))
	run(t, "dpkg", "--validate-version", debver)
	if want := "sluice_" + debver + "_"; !strings.HasPrefix(filepath.Base(deb), want) {
		t.Errorf("the package file %s does not start with %s", filepath.Base(deb), want)
	}
	for _, field := range []string{"Maintainer", "Installed-Size", "Description"} {
		if strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, field)) == "" {
			t.Errorf("control %s is empty", field)
		}
	}
	if got := run(t, "dpkg-deb", "-I", deb, "conffiles"); got != "/etc/default/sluice\n/etc/sluice/sluice.yaml\n" {
		t.Errorf("conffiles: %q", got)
	}
	var files []string
	for _, line := range strings.Split(run(t, "dpkg-deb", "-c", deb), "\n") {
		if fields := strings.Fields(line); len(fields) == 6 {
			files = append(files, strings.TrimPrefix(fields[5], "."))
		}
	}
	for _, want := range []string{"/usr/bin/sluice", "/usr/lib/systemd/system/sluice.service", "/etc/default/sluice",
		"/etc/sluice/sluice.yaml", "/usr/share/man/man1/sluice.1.gz", "/usr/share/man/man1/sluice-serve.1.gz",
		"/usr/share/bash-completion/completions/sluice", "/usr/share/zsh/vendor-completions/_sluice",
		"/usr/share/fish/vendor_completions.d/sluice.fish", "/usr/share/doc/sluice/operations.md",
		"/usr/share/doc/sluice/examples/lab-nat.yaml"} {
		if !slices.Contains(files, want) {
			t.Errorf("the package holds no %s", want)
		}
	}
	// The lab and the benchmarks are sluice-lab's, which a balancer does not get.
	for _, f := range files {
		if strings.Contains(f, "sluice-lab") || strings.Contains(f, "sluice-bench") {
			t.Errorf("the package holds %s: the lab's, not the operator's", f)
		}
	}

	root := filepath.Join(dir, "root")
	if os.Geteuid() == 0 {
		// dpkg --root into an empty admin dir; the scripts run outside a chroot with DPKG_ROOT set,
		// which keeps them off the host's systemd. The dependencies are not in the scratch root.
		admin := filepath.Join(root, "var/lib/dpkg")
		for _, d := range []string{"info", "updates"} {
			if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(admin, "status"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		dpkg := []string{"dpkg", "--root=" + root, "--log=" + filepath.Join(dir, "dpkg.log"), "--force-script-chrootless"}
		run(t, append(dpkg, "--force-depends", "-i", deb)...)
		if out := run(t, append(dpkg, "-s", "sluice")...); !strings.Contains(out, "Status: install ok installed") {
			t.Errorf("dpkg -s after the install:\n%s", out)
		}
		defer func() {
			run(t, append(dpkg, "--purge", "sluice")...)
			if _, err := os.Stat(filepath.Join(root, "usr/bin/sluice")); !os.IsNotExist(err) {
				t.Errorf("the purge left /usr/bin/sluice: %v", err)
			}
		}()
	} else {
		run(t, "dpkg-deb", "-x", deb, root)
	}

	if got, want := run(t, filepath.Join(root, "usr/bin/sluice"), "--version"), "sluice "+version+" "; !strings.HasPrefix(got, want) {
		t.Errorf("the installed sluice --version: %q, want it to start with %q", got, want)
	}
	unit, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/sluice.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/bin/sluice serve ", "Documentation=file:///usr/share/doc/sluice/operations.md"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the installed unit has no %q", want)
		}
	}
	if strings.Contains(string(unit), "/usr/local") {
		t.Errorf("the installed unit names /usr/local:\n%s", unit)
	}
	run(t, filepath.Join(root, "usr/bin/sluice"), "validate", "-f", filepath.Join(root, "etc/sluice/sluice.yaml"))
}

// run runs a command and returns its standard output, failing the test when it fails.
func run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
