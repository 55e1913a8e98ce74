package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/plan"
)

// ExitChanges is the exit status of a plan or dry run that finds changes (0: none, 1: an error),
// like terraform plan -detailed-exitcode.
const ExitChanges = 2

// exitStatus is an error that only sets the exit status: what it reports is printed already.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// changeFlags are the flags of a command that changes the daemon's running config.
type changeFlags struct {
	dryRun bool   // show what would change, change nothing
	noWait bool   // return before the datapath applied the change
	output string // table (a diff), json or yaml
}

// register adds --no-wait and -o to cmd, and --dry-run when dryRun.
func (f *changeFlags) register(cmd *cobra.Command, dryRun bool) {
	if dryRun {
		cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "show what would change (and the share of flows that would move) without changing it; exit status 2 when something would")
	}
	cmd.Flags().BoolVar(&f.noWait, "no-wait", false, "return once the daemon took the change, before the datapath applied it")
	outputFlag(cmd, &f.output)
}

// change runs a change on the daemon and prints what it did (or, with --dry-run, would do). It
// returns once the datapath applied the change, unless --no-wait.
func (g *globals) change(cmd *cobra.Command, f changeFlags, do func(ctx context.Context, c *api.Client) (plan.Change, error)) error {
	c, err := g.requireDaemon(cmd.Context())
	if err != nil {
		return err
	}
	c.NoWait = f.noWait
	change, err := do(cmd.Context(), c)
	if err != nil {
		return err
	}
	return reportChange(cmd.OutOrStdout(), f, change)
}

// reportChange prints a change as f.output asks; a dry run that finds changes is ExitChanges.
func reportChange(w io.Writer, f changeFlags, change plan.Change) error {
	if err := emit(w, f.output, change, func(w io.Writer) error { return printChange(w, change, f.dryRun) }); err != nil {
		return err
	}
	if f.dryRun && !change.Empty() {
		return exitStatus(ExitChanges)
	}
	return nil
}

// printChange writes a change as a diff: a line per service added (+), removed (-) or changed
// (~), under it what differs, a line per BGP setting or peer that differs, then a summary; "no
// changes" when nothing differs.
func printChange(w io.Writer, c plan.Change, dryRun bool) error {
	if c.Empty() {
		_, err := fmt.Fprintln(w, "no changes")
		return err
	}
	mark := map[string]string{plan.OpAdd: "+", plan.OpRemove: "-", plan.OpChange: "~"}
	for _, s := range c.Services {
		line := fmt.Sprintf("%s service %s (%s)", mark[s.Op], s.Name, s.Listener)
		if s.Op == plan.OpChange && len(s.Backends)+len(s.Fields) > 0 {
			line += fmt.Sprintf(": %.1f%% of new flows move to another backend", 100*s.Moved)
		}
		fmt.Fprintln(w, line)
		for _, f := range s.Fields {
			fmt.Fprintf(w, "    ~ %s: %s -> %s\n", f.Field, f.From, f.To)
		}
		for _, b := range s.Backends {
			switch b.Op {
			case plan.OpAdd:
				fmt.Fprintf(w, "    + backend %s weight %d\n", b.Backend, b.To)
			case plan.OpRemove:
				fmt.Fprintf(w, "    - backend %s weight %d\n", b.Backend, b.From)
			default:
				fmt.Fprintf(w, "    ~ backend %s weight %d -> %d\n", b.Backend, b.From, b.To)
			}
		}
	}
	for _, b := range c.BGP {
		switch b.Op {
		case plan.OpAdd:
			fmt.Fprintf(w, "+ %s: %s\n", b.Field, b.To)
		case plan.OpRemove:
			fmt.Fprintf(w, "- %s: %s\n", b.Field, b.From)
		default:
			fmt.Fprintf(w, "~ %s: %s -> %s\n", b.Field, b.From, b.To)
		}
	}
	var counts []string
	for _, x := range []struct {
		n    int
		verb string
	}{{len(c.Added), "added"}, {len(c.Changed), "changed"}, {len(c.Removed), "removed"}} {
		if x.n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", x.n, x.verb))
		}
	}
	var sums []string
	if len(counts) > 0 {
		sums = append(sums, "services: "+strings.Join(counts, ", "))
	}
	if len(c.BGP) > 0 {
		sums = append(sums, fmt.Sprintf("bgp: %d changed", len(c.BGP)))
	}
	summary := strings.Join(sums, "; ")
	if dryRun {
		summary += " (dry run: nothing changed)"
	}
	_, err := fmt.Fprintln(w, summary)
	return err
}
