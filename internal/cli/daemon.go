package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/api"
)

// daemon returns a client of the running daemon, or nil when no daemon answers on the default
// socket (see noDaemon).
func (g *globals) daemon(ctx context.Context) (*api.Client, error) {
	if g.apiURL != "" {
		if err := checkAPIURL(g.apiURL); err != nil {
			return nil, err
		}
		return api.NewTCPClient(g.apiURL, g.apiToken), nil
	}
	if _, err := os.Stat(g.socket); errors.Is(err, os.ErrNotExist) {
		return nil, g.noDaemon(err)
	}
	c := api.NewUnixClient(g.socket)
	if _, err := c.Status(ctx); err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			return nil, g.noDaemon(err) // a stale socket: the daemon is gone
		}
		return nil, fmt.Errorf("the daemon at %s: %w", g.socket, err)
	}
	return c, nil
}

// checkAPIURL refuses an --api value that is not the http(s) URL of a daemon's TCP API.
func checkAPIURL(text string) error {
	u, err := url.Parse(text)
	switch {
	case err != nil && strings.Contains(text, "://"):
		return fmt.Errorf("--api %q: %w", text, errors.Unwrap(err))
	case err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("--api %q is not an http:// or https:// URL (like http://10.0.0.5:9090)", text)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Errorf("--api %q: give the daemon's URL without a query, a fragment or a user (the token goes in --token)", text)
	}
	return nil
}

// requireDaemon is daemon for commands that only the daemon can carry out.
func (g *globals) requireDaemon(ctx context.Context) (*api.Client, error) {
	c, err := g.daemon(ctx)
	if err == nil && c == nil {
		err = fmt.Errorf("no sluice daemon answers on %s: start `sluice serve`, or point --socket or --api at it", g.socket)
	}
	return c, err
}

// outputFlag adds -o table|json|yaml to a command.
func outputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table, json, yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

// viewCmd is a command that shows one view the daemon serves (-o table|json|yaml): fetch reads
// it, table prints it for the table format.
func viewCmd[T any](g *globals, name, short string, fetch func(*api.Client, context.Context) (T, error), table func(io.Writer, T) error) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   name + " [-o table|json|yaml]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.requireDaemon(cmd.Context())
			if err != nil {
				return err
			}
			view, err := fetch(c, cmd.Context())
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), output, view, func(w io.Writer) error { return table(w, view) })
		},
	}
	outputFlag(cmd, &output)
	return cmd
}

// emit writes v as JSON or YAML, or calls table for the table format.
func emit(w io.Writer, output string, v any, table func(io.Writer) error) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		// Through JSON, so that YAML shows the same field names as the API.
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var generic any
		if err := json.Unmarshal(data, &generic); err != nil {
			return err
		}
		return yaml.NewEncoder(w).Encode(generic)
	case "table":
		return table(w)
	}
	return fmt.Errorf("-o: %q is not one of table, json, yaml", output)
}
