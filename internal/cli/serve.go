package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/metrics"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/replication"
	"github.com/sluicelb/sluice/internal/state"
)

// Version is the sluice version reported by the daemon and its metrics.
var Version = "dev"

type serveOptions struct {
	file          string
	listen        string
	tokenFile     string
	metricsListen string
	flushOnExit   bool
	logFormat     string
	resync        time.Duration
	conns         connLimits
	// metricsMaxBackends bounds the backends given series of their own (metrics.WatchOptions).
	metricsMaxBackends int
}

func serveCmd(g *globals) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve -c FILE",
		Short: "Run the daemon: program the datapath, run health checks, serve the API",
		Long: `Run the daemon. It programs the datapath from the config file and keeps it reconciled with
the health checks and the changes made through the API. SIGHUP re-reads the file; a file that does
not validate is rejected and the running state stays. On exit the datapath keeps forwarding (unless
--flush-on-exit), and the next start adopts it without dropping a flow. What the daemon applied is
kept on exit in last-apply.gob beside the default state file: the next daemon or one-shot apply
starts from it instead of reading the datapath back, while nothing else changed the kernel's state.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "config", "c", "/etc/sluice/sluice.yaml", "config file")
	f.StringVar(&o.listen, "listen", "", "also serve the API on this TCP address (needs --token-file)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token the TCP API requires")
	f.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics (/metrics) and the /healthz and /readyz probes on this address (e.g. :9120); with --netns, inside that namespace")
	f.BoolVar(&o.flushOnExit, "flush-on-exit", false, "remove the datapath's rules on exit (default: keep forwarding)")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.DurationVar(&o.resync, "resync", 30*time.Second, "how often the datapath is checked against the kernel and repaired even without a change")
	o.conns.flags(f)
	f.IntVar(&o.metricsMaxBackends, "metrics-max-backends", metrics.DefaultMaxBackends, "give each backend and health probe metrics of its own only up to this many backends (0: never); beyond, only per-service metrics")
	return cmd
}

func serve(ctx context.Context, g *globals, o *serveOptions) error {
	log := g.loggerAs(o.logFormat, "info")
	if o.resync < time.Second {
		return fmt.Errorf("--resync %s: want at least 1s", o.resync)
	}
	if o.metricsMaxBackends < 0 {
		return fmt.Errorf("--metrics-max-backends %d: want 0 (no per-backend metrics) or more", o.metricsMaxBackends)
	}
	lock, err := lockNetns(fmt.Sprintf("sluice serve -c %s, API on %s", o.file, g.socket),
		"one daemon per network namespace: talk to this one through its --socket or --api, or stop it first")
	if err != nil {
		return err
	}
	defer lock.Release()
	store, cfg, err := state.Open(o.file, statePath())
	if err != nil {
		return err
	}
	token, err := readToken(o)
	if err != nil {
		return err
	}
	fdLimit, err := raiseFDLimit()
	if err != nil {
		return err
	}
	if err := checkConnLimits(o, fdLimit, cfg, log); err != nil {
		return err
	}
	dp, err := datapathFor(cfg, log)
	if err != nil {
		return err
	}
	if err := flushOthers(ctx, cfg, log); err != nil {
		return err
	}
	adoptLastApply(cfg, dp, log)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var e *engine.Engine
	replicator, err := replication.New(ctx, dp, stateDir(cfg), log, func(ev replication.Event) { e.SyncEvent(ev.Kind, ev.Message) })
	if err != nil {
		return err
	}
	if err := replicator.Check(cfg); err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	m := metrics.New(Version, log)
	e = engine.New(cfg, engine.Options{ConfigPath: o.file, Datapath: dp, Log: log, OnApply: m.ObserveApply, Resync: o.resync, State: store, Replicator: replicator})
	ct, _ := dp.(datapath.ConntrackReader)
	m.Watch(e, metrics.WatchOptions{MaxBackends: o.metricsMaxBackends, Conntrack: ct})

	handler := api.NewHandler(e, api.Info{Version: Version, Datapath: string(cfg.Datapath), ConfigFile: o.file, Source: string(store.Start().Source), Started: time.Now()})
	metricsMux := http.NewServeMux()
	metricsMux.Handle("GET /metrics", m.Handler())
	metricsMux.Handle("GET /healthz", metrics.Healthz())
	metricsMux.Handle("GET /readyz", metrics.Readyz(e))
	servers, err := listen(g.socket, o, token, handler, metricsMux, log)
	if err != nil {
		return err
	}
	for _, s := range servers {
		go func() {
			if err := s.serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("listener failed", "addr", s.addr, "err", err)
				stop()
			}
		}()
		log.Info("listening", "addr", s.addr)
	}
	go reloadOnHangup(ctx, e, log)

	log.Info("sluice started", "config", o.file, "source", store.Start().Source, "services", len(cfg.Services), "datapath", cfg.Datapath, "version", Version, "commit", Commit)
	runErr := e.Run(ctx) // returns once the datapath apply in flight, if any, ended
	stop()
	replicator.Wait() // conntrackd and its guard table go with the daemon
	withdrawBefore(e, log)
	stopServing(servers, log)
	if o.flushOnExit {
		log.Info("flushing the datapath (--flush-on-exit)")
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := dp.Flush(flush); err != nil {
			return errors.Join(runErr, err)
		}
		return errors.Join(runErr, forgetLastApply(lastApplyPath()))
	}
	keepLastApply(dp, e.Applied(), log)
	log.Info("sluice stopped; the datapath keeps forwarding")
	return runErr
}

// adoptLastApply makes dp start from the last apply (a one-shot apply's, or the daemon's before
// this one) when the kernel still holds it: the first apply then changes what differs instead of
// reading every table back (minutes on nft at 10,000 services). Not holding it costs nothing but
// that read.
func adoptLastApply(cfg *config.Config, dp datapath.Datapath, log *slog.Logger) {
	rememberTables(log)
	p, err := plan.Build(cfg, nil)
	if err != nil {
		return // the engine's first apply reports it
	}
	switch prev, err := restoreLastApply(dp, lastApplyPath(), p, log); {
	case err != nil:
		log.Warn("the last apply is not used: the first apply reads the datapath back", "file", lastApplyPath(), "err", err)
	case prev != nil:
		log.Info("starting from the last apply: the datapath still holds it", "file", lastApplyPath(), "services", len(prev.Services))
	}
}

// keepLastApply keeps what the datapath holds on the daemon's way out (applied, the plan it
// last accepted), for the next daemon or one-shot apply to start from.
func keepLastApply(dp datapath.Datapath, applied *plan.Plan, log *slog.Logger) {
	if applied == nil {
		return // nothing applied: what an earlier apply kept still describes the kernel, or is refused by its generation
	}
	if err := saveLastApply(dp, applied, lastApplyPath()); err != nil {
		log.Warn("keeping the last apply failed: the next start reads the datapath back", "file", lastApplyPath(), "err", err)
	}
}

// stateDir is the directory of the daemon's state file (state.path, or its default), where the
// files of the processes it runs (conntrackd) go too.
func stateDir(cfg *config.Config) string {
	if cfg.State.Path != "" {
		return filepath.Dir(cfg.State.Path)
	}
	return filepath.Dir(statePath())
}

// requestGrace bounds how long the daemon, on its way out, waits for the requests in flight to be
// answered: a change the datapath did not apply is answered 503 at once, a long poll of the
// events with what it has.
const requestGrace = 5 * time.Second

// stopServing closes every listener and waits, up to requestGrace, for the requests in flight to
// be answered; past it their connections are closed, which the log tells.
func stopServing(servers []*listener, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), requestGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			if err := s.Shutdown(ctx); err != nil {
				log.Warn("requests in flight were not answered in time: their connections are closed", "addr", s.addr, "grace", requestGrace, "err", err)
				_ = s.Close()
			}
		})
	}
	wg.Wait()
}

// withdrawBefore withdraws the node's VIPs from its BGP peers and waits the shutdown grace before
// the daemon goes on stopping, so that the routers move the flows to other nodes first; a second
// SIGINT or SIGTERM cuts the grace short.
func withdrawBefore(e *engine.Engine, log *slog.Logger) {
	bound := 10 * time.Second
	if b := e.Config().BGP; b != nil {
		bound += b.ShutdownGraceOrDefault()
		log.Info("withdrawing the vips before stopping (a second signal cuts the grace short)", "grace", b.ShutdownGraceOrDefault())
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	e.Shutdown(ctx)
}

func reloadOnHangup(ctx context.Context, e *engine.Engine, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if change, err := e.Reload(); err != nil {
				log.Error("reload rejected; the running config stays", "err", err)
			} else {
				log.Info("reloaded", "added", change.Added, "removed", change.Removed, "changed", change.Changed)
			}
		}
	}
}

func readToken(o *serveOptions) (string, error) {
	if o.listen == "" {
		return "", nil
	}
	if o.tokenFile == "" {
		return "", errors.New("--listen serves the API over TCP, which needs a bearer token: give --token-file")
	}
	data, err := boundedread.File(o.tokenFile, boundedread.TokenBytes)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if len(token) < 16 {
		return "", fmt.Errorf("--token-file: the token in %s is shorter than 16 characters", o.tokenFile)
	}
	return token, nil
}
