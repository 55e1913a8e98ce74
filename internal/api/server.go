// Package api is Sluice's REST API: JSON over HTTP, versioned under /v1, served on a root-only
// unix socket and, when asked, on TCP behind a bearer token (RequireToken). It is a thin layer over
// the engine: every change goes through engine.Update, which validates the whole resulting config,
// so a request that fails changes nothing.
package api

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/engine"
)

// Info describes the running daemon for GET /v1/status.
type Info struct {
	Version  string
	Datapath string // the datapath in use, like "nft"
	// ConfigFile is the file POST /v1/reload reads; empty when the daemon was started without one.
	ConfigFile string
	// Source is where the running config came from on start: config-file or state-file.
	Source  string
	Started time.Time
}

// MaxBodyBytes bounds a request body; a larger one is answered with 413.
const MaxBodyBytes = 1 << 20

// The timeouts of every listener of the daemon (NewServer). They bound how long a connection
// holds a file descriptor without doing its part: a silent new connection lasts ReadHeaderTimeout,
// a slow body ReadTimeout, a client that does not read its answer WriteTimeout, an idle kept-alive
// connection IdleTimeout.
const (
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout covers the headers and the body; a handler's own work is not counted.
	ReadTimeout = 30 * time.Second
	// WriteTimeout runs from the end of the headers to the end of the answer, so it must outlast
	// the longest answer, a long poll of /v1/events (MaxEventWait).
	WriteTimeout   = MaxEventWait + 30*time.Second
	IdleTimeout    = time.Minute
	MaxHeaderBytes = 64 << 10
)

// NewServer returns an HTTP server of h with the daemon's timeouts and header limit; the API
// listeners and the metrics listener use it. Its Shutdown ends the long polls of /v1/events
// (untilShutdown) rather than waiting them out.
func NewServer(h http.Handler) *http.Server {
	stopping, stop := context.WithCancel(context.Background())
	s := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), shutdownKey{}, stopping)
		},
	}
	s.RegisterOnShutdown(stop)
	return s
}

// NewHandler serves the API of e.
func NewHandler(e *engine.Engine, info Info) http.Handler {
	s := &server{engine: e, info: info}
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		mux.Handle(rt.pattern, rt)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		mux.ServeHTTP(w, r)
	})
}

// server holds what the handlers serve.
type server struct {
	engine *engine.Engine
	info   Info
}

// route is one endpoint: a ServeMux pattern ("METHOD /path"), the query parameters it reads,
// and its handler.
type route struct {
	pattern string
	query   []string
	handle  handler
}

// The query parameters of the routes that change something: every one of them takes ?wait (the
// client sends ?wait=false to any of them), most ?dry_run too.
var (
	changeQuery = []string{"dry_run", "wait"}
	waitQuery   = []string{"wait"}
)

// routes lists every endpoint; openapi.yaml documents each one.
func (s *server) routes() []route {
	return []route{
		{"GET /v1/status", nil, s.status},
		{"GET /v1/services", nil, s.listServices},
		{"POST /v1/services", changeQuery, s.addService},
		{"GET /v1/services/{name}", nil, s.getService},
		{"PUT /v1/services/{name}", changeQuery, s.putService},
		{"DELETE /v1/services/{name}", changeQuery, s.removeService},
		{"POST /v1/services/{name}/backends", changeQuery, s.addBackend},
		{"GET /v1/services/{name}/backends/{backend}", nil, s.getBackend},
		{"PATCH /v1/services/{name}/backends/{backend}", changeQuery, s.patchBackend},
		{"DELETE /v1/services/{name}/backends/{backend}", changeQuery, s.removeBackend},
		{"POST /v1/services/{name}/backends/{backend}/drain", changeQuery, s.drain},
		{"GET /v1/services/{name}/flows", []string{"backend", "limit"}, s.flows},
		{"GET /v1/drains", nil, s.listDrains},
		{"GET /v1/health", nil, s.health},
		{"GET /v1/config", []string{"format"}, s.getConfig},
		{"PUT /v1/config", changeQuery, s.putConfig},
		{"POST /v1/plan", waitQuery, s.plan},
		{"POST /v1/reload", waitQuery, s.reload},
		{"GET /v1/events", []string{"since", "wait"}, s.events},
		{"GET /v1/bgp", nil, s.bgp},
		{"GET /v1/sync", nil, s.sync},
		{"GET /v1/node", nil, s.node},
		{"POST /v1/node/drain", waitQuery, s.drainNode},
		{"POST /v1/node/undrain", waitQuery, s.undrainNode},
		{"GET /v1/openapi.yaml", nil, s.openAPI},
	}
}

// ServeHTTP answers a query parameter the route does not read, one given twice or a query that
// does not parse with 400 before the handler runs: a misspelt ?dry_run must not make a change.
func (rt route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r.URL.RawQuery, rt.query); err != nil {
		writeError(w, err)
		return
	}
	rt.handle.ServeHTTP(w, r)
}

// checkQuery refuses a query holding a parameter not in known, or one given twice.
func checkQuery(raw string, known []string) error {
	values, err := url.ParseQuery(raw)
	if err != nil {
		return invalid("", "the query %q does not parse: %v", raw, err)
	}
	for name, v := range values {
		switch {
		case !slices.Contains(known, name) && len(known) == 0:
			return invalid(name, "unknown query parameter: this route takes none")
		case !slices.Contains(known, name):
			return invalid(name, "unknown query parameter: this route takes %s", strings.Join(known, ", "))
		case len(v) > 1:
			return invalid(name, "given %d times: give it once", len(v))
		}
	}
	return nil
}

// handler is an endpoint: it writes its answer, or returns the error to answer with.
type handler func(w http.ResponseWriter, r *http.Request) error

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h(w, r); err != nil {
		writeError(w, err)
	}
}
