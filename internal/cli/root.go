// Package cli holds the sluice command line: one file per command group.
package cli

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
)

// netnsEnv names the network namespace commands run in when --netns is not given, so that a shell
// can point every command at one balancer (the lab's: export SLUICE_NETNS=sluice-lb).
const netnsEnv = "SLUICE_NETNS"

// enteredEnv marks a process already re-executed inside the namespace it names.
const enteredEnv = "SLUICE_NETNS_ENTERED"

type globals struct {
	netns    string
	logLevel string
	socket   string
	// socketGiven tells that --socket or SLUICE_SOCKET named the socket: no daemon there is an
	// error, where no daemon on the default socket means reading the kernel.
	socketGiven bool
	apiURL      string
	apiToken    string
}

// Execute runs the command line and returns the process exit status.
func Execute() int { return Run(rootCmd()) }

// Run runs a command line (sluice's, or sluice-lab's) and returns the process exit status; an
// error prints after the command's name.
func Run(root *cobra.Command) int {
	if err := root.Execute(); err != nil {
		var status exitStatus
		if errors.As(err, &status) {
			return int(status) // what it reports is printed already
		}
		fmt.Fprintln(os.Stderr, root.Name()+":", err)
		return 1
	}
	return 0
}

// Command is the whole command line, for tools that document it (packaging/gendocs).
func Command() *cobra.Command { return rootCmd() }

// rootCmd is the whole command line.
func rootCmd() *cobra.Command {
	root, _ := rootCmdWith()
	return root
}

// rootCmdWith is the whole command line and the globals its flags fill.
func rootCmdWith() (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Layer-4 load balancer on kernel datapaths",
		Version:       currentBuild().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLogFlags(cmd); err != nil {
				return err
			}
			g.chooseNamespace(cmd)
			return g.enterNetns()
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&g.netns, "netns", os.Getenv(netnsEnv), "run inside this named network namespace, like ip netns exec NAME sluice ... (default $"+netnsEnv+")")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "", "log level: debug, info, warn, error (default: info for serve, warn otherwise)")
	root.PersistentFlags().StringVar(&g.socket, "socket", envOr("SLUICE_SOCKET", api.DefaultSocket), "the daemon's API socket (with --netns NAME: "+api.NetnsSocket("NAME")+")")
	root.PersistentFlags().StringVar(&g.apiURL, "api", os.Getenv("SLUICE_API"), "talk to the daemon's TCP API at this URL instead of the socket")
	root.PersistentFlags().StringVar(&g.apiToken, "token", os.Getenv("SLUICE_TOKEN"), "bearer token for --api")
	root.AddCommand(validateCmd(), applyCmd(g), listCmd(g), flushCmd(g), serveCmd(g),
		serviceCmd(g), backendCmd(g), healthCmd(g), eventsCmd(g), planCmd(g), reloadCmd(g), whichCmd(g), flowsCmd(g), bgpCmd(g), syncCmd(g), nodeCmd(g), versionCmd())
	root.AddCommand(schemaCmd(), importCmd(), decapCmd())
	return root, g
}

// chooseNamespace settles the namespace cmd acts on (--netns, else $SLUICE_NETNS) and the socket
// of its daemon.
func (g *globals) chooseNamespace(cmd *cobra.Command) {
	if !cmd.Flags().Changed("netns") && !actsOnNetns(cmd) {
		g.netns = "" // $SLUICE_NETNS points the balancer's commands only
	}
	g.socketGiven = cmd.Flags().Changed("socket") || os.Getenv("SLUICE_SOCKET") != ""
	if !g.socketGiven && g.netns != "" {
		// A daemon of another namespace (the host's, on the default socket) must never take a
		// command meant for this one.
		g.socket = api.NetnsSocket(g.netns)
	}
}

// ownNamespaceCommands are the top-level commands that touch no namespace: $SLUICE_NETNS does not
// apply to them.
var ownNamespaceCommands = []string{"validate", "import", "schema", "version", "completion", "help"}

// actsOnNetns tells whether cmd reads or writes the balancer of a network namespace.
func actsOnNetns(cmd *cobra.Command) bool {
	for cmd.HasParent() && cmd.Parent().HasParent() {
		cmd = cmd.Parent()
	}
	return !slices.Contains(ownNamespaceCommands, cmd.Name())
}

func (g *globals) logger() *slog.Logger { return g.loggerAs("text", "") }

// logFormats are the values of serve's --log-format.
var logFormats = []string{"text", "json"}

// checkLogFlags refuses a --log-level, or a --log-format of the command, that no logger takes.
func checkLogFlags(cmd *cobra.Command) error {
	if name, _ := cmd.Flags().GetString("log-level"); name != "" {
		var level slog.Level
		if err := level.UnmarshalText([]byte(name)); err != nil {
			return fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", name)
		}
	}
	if format, err := cmd.Flags().GetString("log-format"); err == nil && !slices.Contains(logFormats, format) {
		return fmt.Errorf("--log-format: %q is not one of %s", format, strings.Join(logFormats, ", "))
	}
	return nil
}

// loggerAs logs in format "text" or "json"; an unset --log-level means fallback, an unset
// fallback warn. checkLogFlags has refused other values.
func (g *globals) loggerAs(format, fallback string) *slog.Logger {
	name := cmp.Or(g.logLevel, fallback, "warn")
	var level slog.Level
	_ = level.UnmarshalText([]byte(name))
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// noDaemon is what finding no daemon on the socket means: nothing on the default socket (reading
// the kernel will do), an error on one the operator named.
func (g *globals) noDaemon(why error) error {
	if !g.socketGiven {
		return nil
	}
	return fmt.Errorf("no sluice daemon answers on --socket %s (%w): start it, or leave --socket and SLUICE_SOCKET unset to read the kernel", g.socket, why)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// enterNetns re-executes sluice through nsenter so that the whole process, and the nft it runs,
// lives in the named network namespace; a Go process cannot move all its threads itself. Unlike
// `ip netns exec` it keeps the mount namespace, so the BPF filesystem, where the ebpf datapath
// pins what must outlive the process, stays the host's.
func (g *globals) enterNetns() error {
	if g.netns == "" || os.Getenv(enteredEnv) == g.netns {
		return nil
	}
	path := filepath.Join(netnsDir, g.netns)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("--netns %s: no such named network namespace (%w)", g.netns, err)
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("--netns needs util-linux's nsenter: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"nsenter", "--net=" + path, "--", self}
	args = append(args, withoutNetnsFlag(os.Args[1:])...)
	// The re-executed process finds its namespace in the environment, as its --netns is gone.
	// A variable set twice is read by its first entry, so the old ones go.
	env := slices.DeleteFunc(slices.Clone(os.Environ()), func(kv string) bool {
		return strings.HasPrefix(kv, netnsEnv+"=") || strings.HasPrefix(kv, enteredEnv+"=")
	})
	env = append(env, netnsEnv+"="+g.netns, enteredEnv+"="+g.netns)
	return syscall.Exec(nsenter, args, env)
}

// netnsDir is where iproute2 keeps named network namespaces.
const netnsDir = "/var/run/netns"

func withoutNetnsFlag(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--netns":
			i++
		case strings.HasPrefix(a, "--netns="):
		default:
			out = append(out, a)
		}
	}
	return out
}
