package cli

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/config"
)

// datapathFDs is the part of the open-file limit kept for the datapath (nft processes, netlink and
// BPF sockets, pinned maps) and the daemon's own files, beside one per health probe.
const datapathFDs = 256

// connLimits are the connection limits of the daemon's listeners (flags of sluice serve).
type connLimits struct {
	socket, listen, metrics int
}

func (c *connLimits) flags(f *pflag.FlagSet) {
	f.IntVar(&c.socket, "socket-max-conns", 64, "connections the API socket serves at once; more wait in the kernel's backlog")
	f.IntVar(&c.listen, "listen-max-conns", 256, "connections the TCP API (--listen) serves at once; more wait in the kernel's backlog")
	f.IntVar(&c.metrics, "metrics-max-conns", 16, "connections the metrics listener serves at once; more wait in the kernel's backlog")
}

// checkConnLimits makes sure that the listeners o asks for can hold at most half of fdLimit, so
// that what they cannot take is left to the health probes and the datapath, and warns when the
// probes of cfg may not fit in that half.
func checkConnLimits(o *serveOptions, fdLimit uint64, cfg *config.Config, log *slog.Logger) error {
	c := o.conns
	var sum uint64
	var terms string
	for _, l := range []struct {
		flag   string
		n      int
		needed bool
	}{{"--socket-max-conns", c.socket, true}, {"--listen-max-conns", c.listen, o.listen != ""}, {"--metrics-max-conns", c.metrics, o.metricsListen != ""}} {
		if l.n < 1 {
			return fmt.Errorf("%s %d: want at least 1", l.flag, l.n)
		}
		if l.needed {
			sum += uint64(l.n)
			terms += fmt.Sprintf(" + %s %d", l.flag, l.n)
		}
	}
	if sum > fdLimit/2 {
		return fmt.Errorf("%s = %d connections: more than half of the open-file limit (RLIMIT_NOFILE %d), whose other half is kept for the health probes and the datapath; lower them or raise the limit (LimitNOFILE= in the unit)",
			terms[3:], sum, fdLimit)
	}
	if probes := probeFDs(cfg); sum+probes+datapathFDs > fdLimit {
		log.Warn("the open-file limit may be too low for the health probes: raise LimitNOFILE",
			"limit", fdLimit, "listeners", sum, "probes", probes, "datapath", datapathFDs)
	}
	return nil
}

// probeFDs bounds the file descriptors the health probes of cfg hold at once: one per checked
// backend (probes shared between services count once, so this is an upper bound).
func probeFDs(cfg *config.Config) uint64 {
	var n uint64
	for _, s := range cfg.Services {
		if s.HealthCheck != nil {
			n += uint64(len(s.Backends) + len(s.SorryServers))
		}
	}
	return n
}

// raiseFDLimit raises the soft open-file limit to the hard one and returns it. Go's runtime already
// does so at start; this reads the result and covers a runtime that did not.
func raiseFDLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return 0, fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", rl.Max, err)
		}
	}
	return rl.Cur, nil
}

// listener is one HTTP server on its own listener.
type listener struct {
	*http.Server
	addr string
	ln   net.Listener
}

func (l *listener) serve() error { return l.Serve(l.ln) }

// listen opens the API socket, and the TCP API and metrics listeners when asked for, each with
// the daemon's timeouts (api.NewServer) and its own connection limit, so that a flood of one
// leaves the others answering.
func listen(socket string, o *serveOptions, token string, handler, metricsHandler http.Handler, log *slog.Logger) ([]*listener, error) {
	var out []*listener
	add := func(ln net.Listener, limit int, h http.Handler) {
		out = append(out, &listener{Server: api.NewServer(h), addr: ln.Addr().String(), ln: api.LimitListener(ln, limit, log)})
	}
	ln, err := api.ListenUnix(socket)
	if err != nil {
		return nil, err
	}
	add(ln, o.conns.socket, handler)
	for _, l := range []struct {
		addr, flag string
		limit      int
		handler    http.Handler
	}{{o.listen, "--listen", o.conns.listen, api.RequireToken(token, handler)}, {o.metricsListen, "--metrics-listen", o.conns.metrics, metricsHandler}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			return nil, fmt.Errorf("%s: %w", l.flag, err)
		}
		add(ln, l.limit, l.handler)
	}
	return out, nil
}
