package nft

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/knftables"
)

// nftOnlyHost is a kernel host whose transactions all go through nft.
type nftOnlyHost struct{ kernelHost }

func (nftOnlyHost) write(*changeSet) (bool, string, error) { return false, "nft only", nil }

// countingHost is a kernel host that counts the transactions it wrote over netlink.
type countingHost struct {
	kernelHost
	written int
}

func (h *countingHost) write(cs *changeSet) (bool, string, error) {
	written, why, err := h.kernelHost.write(cs)
	if written {
		h.written++
	}
	return written, why, err
}

// netlinkTransitions are the transitions whose change the netlink writer must encode: the
// changes of backends, on every kind of backend chain, a service removed by name, and new
// services and service chains, compiled by nft in a scratch namespace.
var netlinkTransitions = []string{"add-backend", "remove-backend", "weight-zero", "dsr-add-backend", "fullnat-v6-persistence-add-backend",
	"remove-nat-service", "add-nat-service", "change-scheduler", "half-open-timeouts-off"}

// TestKernelNetlinkWritesWhatNFTWrites applies every transition twice from the same tables, once
// through nft and once as the datapath chooses: the tables must end up byte for byte the same,
// as nft --debug=netlink lists them (the rules' expressions, the elements' keys, data and user
// data), and the changes of backends must have been written over netlink.
func TestKernelNetlinkWritesWhatNFTWrites(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/transitions/*")
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			before, after := loadPlan(t, filepath.Join(dir, "before.yaml")), loadPlan(t, filepath.Join(dir, "after.yaml"))
			var listings [2]string
			counting := &countingHost{}
			for i, h := range []host{nftOnlyHost{}, counting} {
				inFreshNetns(t, func() {
					d := newTestDatapath(t)
					d.host = nftOnlyHost{}
					apply(t, d, before)
					d.host = h
					apply(t, d, after)
					if n := pending(t, d, after); n != 0 {
						t.Fatalf("%d operations pending after the change", n)
					}
					listings[i] = bytecodeListing(t)
				})
			}
			if listings[0] != listings[1] {
				t.Errorf("the tables differ; only through nft:\n%s\n--- only as the datapath wrote them:\n%s",
					linesOnlyIn(listings[0], listings[1]), linesOnlyIn(listings[1], listings[0]))
			}
			if want := slices.Contains(netlinkTransitions, filepath.Base(dir)); want && counting.written == 0 {
				t.Errorf("the change went through nft, want it over netlink")
			}
		})
	}
}

// linesOnlyIn is the lines of a that b does not have.
func linesOnlyIn(a, b string) string {
	have := map[string]bool{}
	for _, l := range strings.Split(b, "\n") {
		have[l] = true
	}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !have[l] {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var (
	// handles matches the handles that follow a rule's chain in nft --debug=netlink's listing.
	handles = regexp.MustCompile(`^((?:inet|netdev) sluice \S+)(?: \d+)+$`)
	// expires matches the time an element with a timeout has left, which the clock moves.
	expires = regexp.MustCompile(` expires \S+`)
)

// bytecodeListing is nft --debug=netlink's listing of Sluice's tables, comparable between two
// namespaces: rules without their handles, each set's elements sorted (a hash set lists them in
// its hash's order, seeded per set).
func bytecodeListing(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "--debug=netlink", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v: %s", err, out)
	}
	var blocks []string
	var block []string
	flush := func() {
		if len(block) > 0 {
			slices.Sort(block[1:])
			blocks = append(blocks, strings.Join(block, "\n"))
		}
		block = nil
	}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
		case strings.HasPrefix(line, "inet ") || strings.HasPrefix(line, "netdev "):
			flush()
			block = []string{handles.ReplaceAllString(line, "$1")}
		case strings.HasPrefix(line, "\telement "):
			block = append(block, line)
		default:
			flush() // the ruleset's text after the bytecode: kept as it is, but for expiries
			blocks = append(blocks, expires.ReplaceAllString(line, " expires -"))
		}
	}
	flush()
	return strings.Join(blocks, "\n")
}

// TestKernelNetlinkBatchIsAtomic: a batch the kernel refuses in its last message changes nothing
// of what its first messages did, and the error names the refused command.
func TestKernelNetlinkBatchIsAtomic(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		apply(t, d, loadPlan(t, "testdata/transitions/add-backend/before.yaml"))
		before := bytecodeListing(t)
		cs := &changeSet{}
		cs.Add(&knftables.Counter{Family: knftables.InetFamily, Table: TableName, Name: "c-new"})
		cs.Add(&knftables.Chain{Family: knftables.InetFamily, Table: TableName, Name: "be-new"})
		cs.Delete(&knftables.Chain{Family: knftables.InetFamily, Table: TableName, Name: "no-such-chain"})
		written, why, err := writeChange(cs)
		if !written {
			t.Fatalf("not written over netlink: %s", why)
		}
		if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "delete chain no-such-chain") {
			t.Fatalf("error %v; want ENOENT naming the delete of no-such-chain", err)
		}
		if after := bytecodeListing(t); after != before {
			t.Fatalf("a refused batch changed the tables:\n%s\n--- before:\n%s", after, before)
		}
		if err := d.Apply(context.Background(), loadPlan(t, "testdata/transitions/add-backend/after.yaml")); err != nil {
			t.Fatalf("the next change: %v", err)
		}
	})
}
