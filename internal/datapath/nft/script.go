package nft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"sigs.k8s.io/knftables"
)

// scriptRunner is the datapath's knftables.Interface on the machine: its transactions are built
// by knftables' fake (the same text a real interface's make, without running nft to make one) and
// Run runs them through `nft -f`, coalescing the element commands that nft 1.0.6 would otherwise
// send one netlink message each (see coalesce). The datapath calls only NewTransaction and Run on
// it. The unit tests put knftables' fake in its place.
type scriptRunner struct{ knftables.Interface }

// Run runs tx through `nft -f`, its element commands coalesced; the error carries the first lines
// nft wrote.
func (scriptRunner) Run(ctx context.Context, tx *knftables.Transaction) error {
	script, err := coalesce(tx.String())
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%w: %s", err, firstLines(msg, 20))
		}
		return err
	}
	return nil
}

// coalesce rewrites a transaction's script so that consecutive commands adding (or deleting)
// elements of one set are one command holding all their elements. nft 1.0.6 sends each command as
// its own netlink message, and the kernel finds the set of each message by walking the table's
// list of sets: one command per element made loading 10,000 services (20,000 sets) quadratic,
// 18 s for the last 40,000 elements. One command per set also costs nft about half the memory.
func coalesce(script string) (string, error) {
	var out strings.Builder
	out.Grow(len(script))
	var head string    // "add element inet sluice slots-x" of the command being built
	var elems []string // its elements
	flush := func() {
		if head != "" {
			out.WriteString(head)
			out.WriteString(" { ")
			out.WriteString(strings.Join(elems, ", "))
			out.WriteString(" }\n")
		}
		head, elems = "", elems[:0]
	}
	for line := range strings.Lines(script) {
		line = strings.TrimSuffix(line, "\n")
		if msg, ok := strings.CutPrefix(line, "# ERROR: "); ok {
			return "", errors.New(msg)
		}
		h, body, ok := elementCommand(line)
		if !ok {
			flush()
			out.WriteString(line)
			out.WriteByte('\n')
			continue
		}
		if h != head {
			flush()
			head = h
		}
		elems = append(elems, body)
	}
	flush()
	return out.String(), nil
}

// elementCommand splits "add element inet sluice slots-x { 0 : goto be-x }" into its head and
// its element; ok is false for any other command.
func elementCommand(line string) (head, element string, ok bool) {
	if !strings.HasPrefix(line, "add element ") && !strings.HasPrefix(line, "delete element ") {
		return "", "", false
	}
	open := strings.Index(line, " { ")
	if open < 0 || !strings.HasSuffix(line, " }") {
		return "", "", false
	}
	return line[:open], line[open+3 : len(line)-2], true
}

// firstLines is the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}
