package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/engine"
)

func eventsCmd(g *globals) *cobra.Command {
	var follow bool
	var output string
	cmd := &cobra.Command{
		Use:   "events [-f] [-o table|json|yaml]",
		Short: "Show the daemon's recent events (backends up and down, drains, reloads, failed applies)",
		Long: `Shows the events the daemon keeps, oldest first. -o json writes one object per line.
With -f it keeps printing events as they happen, and waits for a daemon that stops or restarts
(with a note on stderr) rather than exiting.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := eventWriter(output); err != nil {
				return err
			}
			c, err := g.requireDaemon(cmd.Context())
			if err != nil {
				return err
			}
			return followEvents(cmd.Context(), c, follow, output, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they happen, across daemon restarts")
	outputFlag(cmd, &output)
	return cmd
}

// eventsBackoff bounds the wait between tries to reach a daemon that stopped answering.
const (
	eventsBackoffMin = 500 * time.Millisecond
	eventsBackoffMax = 10 * time.Second
)

// followEvents prints the daemon's events and, when follow is set, the ones after them; a daemon
// that stops answering is tried again with backoff, and one that restarted (its event ids begin
// again) has all its events printed.
func followEvents(ctx context.Context, c *api.Client, follow bool, output string, out, errOut io.Writer) error {
	write, err := eventWriter(output)
	if err != nil {
		return err
	}
	var since uint64
	var last engine.Event // the last event printed, to tell a restarted daemon by
	backoff, lost := eventsBackoffMin, false
	header := output == "table"
	for {
		wait := time.Duration(0)
		if follow && since > 0 && !lost {
			wait = 30 * time.Second
		}
		ask := since
		if lost {
			ask = 0 // read them all, to tell a restarted daemon from one that came back
		}
		events, err := c.Events(ctx, ask, wait)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil // interrupted
			}
			if !follow {
				return err
			}
			if !lost {
				fmt.Fprintf(errOut, "sluice events: lost the daemon (%v); trying again\n", err)
			}
			lost = true
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, eventsBackoffMax)
			continue
		}
		if lost {
			fmt.Fprintln(errOut, "sluice events: the daemon answers again")
			if !holds(events, last) {
				since = 0 // a new daemon, whose ids begin again
			}
			lost, backoff = false, eventsBackoffMin
		}
		if header {
			if _, err := fmt.Fprintln(out, eventRow("TIME", "TYPE", "SERVICE", "BACKEND", "MESSAGE")); err != nil {
				return err
			}
			header = false
		}
		for _, e := range events {
			if e.ID <= since {
				continue
			}
			since, last = e.ID, e
			if err := write(out, e); err != nil {
				return err
			}
		}
		if !follow {
			return emptyList(out, output, since)
		}
		since = max(since, 1) // wait for the next event even when none was kept
	}
}

// emptyList prints YAML's empty sequence when no event was printed (since is 0), so that -o yaml
// always prints a list.
func emptyList(out io.Writer, output string, since uint64) error {
	if output != "yaml" || since > 0 {
		return nil
	}
	_, err := fmt.Fprintln(out, "[]")
	return err
}

// holds tells whether a daemon's events include e, the last one printed: a daemon that restarted
// numbers its events from 1 again, so an event of the same ID may be another one.
func holds(events []engine.Event, e engine.Event) bool {
	for _, got := range events {
		if got.ID == e.ID {
			return got.Time.Equal(e.Time) && got.Type == e.Type && got.Message == e.Message
		}
	}
	return false
}

// eventWriter writes one event in the output format.
func eventWriter(output string) (func(io.Writer, engine.Event) error, error) {
	switch output {
	case "table":
		return func(w io.Writer, e engine.Event) error {
			_, err := fmt.Fprintln(w, eventRow(e.Time.Format(time.RFC3339), e.Type, e.Service, e.Backend, e.Message))
			return err
		}, nil
	case "json":
		return func(w io.Writer, e engine.Event) error { return json.NewEncoder(w).Encode(e) }, nil
	case "yaml":
		// Each event an item of one YAML sequence: items printed one after another, also as
		// they come with -f, make a single list.
		return func(w io.Writer, e engine.Event) error {
			return emit(w, "yaml", []engine.Event{e}, nil)
		}, nil
	}
	return nil, fmt.Errorf("-o: %q is not one of table, json, yaml", output)
}

// eventRow lays an event out in fixed columns, so that rows printed as events come align; a
// value longer than its column pushes the rest of its row along.
func eventRow(when, typ, service, backend, message string) string {
	// A message of several lines (a reload's errors, one per line) stays on its row.
	message = strings.ReplaceAll(message, "\n", " | ")
	row := fmt.Sprintf("%-25s  %-18s  %-16s  %-21s  %s", when, typ, orDash(service), orDash(backend), message)
	return strings.TrimRight(row, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
