package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/lab"
)

// TestDaemonRestartStartsFromItsLastApply: a daemon keeps what it applied on its way out
// (last-apply.gob), and the next one starts from it instead of reading the datapath back, on both
// datapaths, and on nft with a sync section too (conntrackd's guard table, an nftables table of
// the daemon's own, comes and goes with it). A change it then applies leaves the kernel as a
// read-back finds it: a one-shot plan of the same services, with the last apply removed so that
// it reads the kernel, has no change.
func TestDaemonRestartStartsFromItsLastApply(t *testing.T) {
	requireLab(t)
	b1, b2, b3 := theLab.BackendAddr(1, false), theLab.BackendAddr(2, false), theLab.BackendAddr(3, false)
	secret := writeConfig(t, "sync.secret", "a secret of the sync link, 32 by\n")
	for _, c := range []struct{ name, dp, sync string }{
		{"nft", "nft", ""},
		{"ebpf", "ebpf", ""},
		{"nft-sync", "nft", fmt.Sprintf("sync: {interface: eth1, peers: [10.91.2.200], secret_file: %s, initial_sync_timeout: 1s}\n", secret)},
	} {
		t.Run(c.name, func(t *testing.T) {
			freshBalancer(t)
			services := func(backends ...fmt.Stringer) string {
				y := fmt.Sprintf("datapath: %s\n%sservices:\n  - name: web\n    vip: %s\n    port: 80\n    backends:\n", c.dp, c.sync, lab.VIP4)
				for _, b := range backends {
					y += fmt.Sprintf("      - {address: %s}\n", b)
				}
				return y
			}
			d := startDaemon(t, writeConfig(t, "sluice.yaml", services(b1, b2)))
			d.stop()
			kept := filepath.Join("/var/lib/sluice/netns", theLab.BalancerNS(), "last-apply.gob")
			if _, err := os.Stat(kept); err != nil {
				t.Fatalf("the stopped daemon kept no last apply: %v", err)
			}
			d.start()
			if log, _ := os.ReadFile(d.log); !strings.Contains(string(log), "starting from the last apply") {
				t.Errorf("the restarted daemon did not start from the last apply:\n%s", log)
			}
			if r := d.cli("backend", "add", "web", b3.String()); r.Err != nil {
				t.Fatalf("backend add: %v\n%s", r.Err, r.Stderr)
			}
			d.stop()
			if err := os.Remove(kept); err != nil {
				t.Fatal(err)
			}
			c.sync = "" // the one-shot plan programs services only
			file := writeConfig(t, "same.yaml", services(b1, b2, b3))
			r := run(t, sluiceBin, "--netns", theLab.BalancerNS(), "plan", "-f", file)
			if r.Err != nil || !strings.Contains(r.Stdout, "no changes") {
				t.Errorf("a read-back after the restarted daemon's change finds: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
			}
		})
	}
}
