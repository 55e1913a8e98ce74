package labcli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
	"github.com/sluicelb/sluice/internal/lab"
)

// benchFlags are the flags every bench subcommand shares.
type benchFlags struct {
	prefix   string
	backends int
	jsonPath string
	reuseLab bool
	sluice   string
}

func benchCmd() *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure balancers, the network and scaling in a network-namespace lab (needs root)",
	}
	cmd.PersistentFlags().StringVar(&f.prefix, "prefix", "sluice-bench", "namespace name prefix of the benchmark's lab")
	cmd.PersistentFlags().BoolVar(&f.reuseLab, "reuse-lab", false, "with --prefix, take (and at the end tear down) a lab of that prefix that exists; without, the benchmark refuses it")
	cmd.PersistentFlags().IntVar(&f.backends, "backends", 3, "number of nginx backends in the lab")
	cmd.PersistentFlags().StringVar(&f.jsonPath, "json", "", "also write the results as JSON to this file (- for stdout, replacing the table)")
	cmd.PersistentFlags().StringVar(&f.sluice, "sluice", "", "the sluice binary that programs the balancers (default: the one beside sluice-lab, else sluice on $PATH)")
	cmd.AddCommand(benchLBCmd(f), benchNetCmd(f), benchScaleCmd(f), benchFleetCmd(f), benchFailoverCmd(f), benchFloodCmd(f), benchPPSCmd(f))
	return cmd
}

// run runs benchmark name, the shape every bench subcommand shares: it checks o first (so a bad
// flag needs neither root nor a lab), then gives measure the environment (the lab named by the
// flags, refused if it exists unless --reuse-lab) and a context that an interrupt or SIGTERM
// cancels, so that the benchmark tears its lab down; then it prints the result's table and
// writes its JSON report as asked. Errors name the benchmark.
func (f *benchFlags) run(cmd *cobra.Command, name string, o bench.Options, measure func(context.Context, *bench.Env) (bench.Result, error)) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("bench %s: %w", name, err)
		}
	}()
	if err := o.Check(); err != nil {
		return err
	}
	env, ctx, err := f.env(cmd)
	if err != nil {
		return err
	}
	res, err := measure(ctx, env)
	env.Progress.Done()
	if err != nil {
		return err
	}
	return f.report(cmd, res)
}

// runInOwnLab runs benchmark name as run does, in a lab named after this process (lab.RunPrefix
// of kind) unless --prefix is given, so that it never takes another run's lab; output (-o) is
// table, or json for the JSON report on stdout.
func (f *benchFlags) runInOwnLab(cmd *cobra.Command, name, kind, output string, o bench.Options, measure func(context.Context, *bench.Env) (bench.Result, error)) error {
	switch output {
	case "table":
	case "json":
		f.jsonPath = "-"
	default:
		return fmt.Errorf("bench %s: -o: %q is not table or json", name, output)
	}
	if !cmd.Flags().Changed("prefix") {
		f.prefix = lab.RunPrefix(kind, os.Getpid())
	}
	return f.run(cmd, name, o, measure)
}

// installPeersIf installs the peers (nftlb, HAProxy, nginx stream, ...) from Debian packages when
// --install-peers asks for it.
func installPeersIf(ctx context.Context, env *bench.Env, asked bool) error {
	if !asked {
		return nil
	}
	env.Progress.Step("installing peers: %v", bench.PeerPackages)
	return bench.InstallPeers(ctx)
}

// env returns the benchmark environment (the lab named by the flags, programmed by the sluice
// binary, its helpers run by this one) and a context that an interrupt or SIGTERM cancels.
func (f *benchFlags) env(cmd *cobra.Command) (*bench.Env, context.Context, error) {
	if os.Geteuid() != 0 {
		return nil, nil, fmt.Errorf("needs root (it builds network namespaces)")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("finding the sluice-lab binary: %w", err)
	}
	sluice, err := f.sluiceBinary(self)
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	cobra.OnFinalize(stop)
	env := bench.NewEnv(f.prefix, f.backends, sluice, self, bench.NewProgress(cmd.ErrOrStderr()))
	if cmd.Flags().Changed("prefix") && !f.reuseLab {
		if err := env.RefuseExistingLab(ctx); err != nil {
			return nil, nil, err
		}
	}
	return env, ctx, nil
}

// sluiceBinary is the sluice binary the benchmark runs: --sluice, else the sluice beside
// sluice-lab (at self; make build puts both in bin/), else the one on $PATH.
func (f *benchFlags) sluiceBinary(self string) (string, error) {
	if f.sluice != "" {
		if _, err := os.Stat(f.sluice); err != nil {
			return "", fmt.Errorf("--sluice: %w", err)
		}
		return filepath.Abs(f.sluice)
	}
	beside := filepath.Join(filepath.Dir(self), "sluice")
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	path, err := exec.LookPath("sluice")
	if err != nil {
		return "", fmt.Errorf("no sluice binary beside %s nor on $PATH: build it (make build) or name it with --sluice", self)
	}
	return path, nil
}

// report prints the result's table (unless JSON goes to stdout) and writes the JSON report if asked.
func (f *benchFlags) report(cmd *cobra.Command, res bench.Result) error {
	if f.jsonPath != "-" {
		fmt.Fprint(cmd.OutOrStdout(), res.Table())
	}
	if f.jsonPath == "" {
		return nil
	}
	data, err := json.MarshalIndent(bench.Report{
		Command: strings.Join(os.Args, " "), Machine: bench.ThisMachine(), Results: res,
	}, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if f.jsonPath == "-" {
		_, err = cmd.OutOrStdout().Write(data)
		return err
	}
	return os.WriteFile(f.jsonPath, data, 0o644)
}
