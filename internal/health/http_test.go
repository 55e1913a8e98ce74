package health

import (
	"crypto/md5"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// serveHTTP starts a test server on loopback (with TLS when secure) and returns its address.
func serveHTTP(t *testing.T, loopback netip.Addr, secure bool, handler http.Handler) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(loopback, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // rejected certificates are expected
	if secure {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(l.Addr().String())
}

// healthHandler answers the paths the http tests probe.
func healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "all good")
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/broken", http.StatusFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("x", maxBodyScan), "marker")
	})
	mux.HandleFunc("/full", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("x", maxBodyScan))
	})
	mux.HandleFunc("/vhost", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "health.example" {
			http.Error(w, "wrong host "+r.Host, http.StatusMisdirectedRequest)
			return
		}
	})
	mux.HandleFunc("/query", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("deep") != "1" {
			http.Error(w, "shallow", http.StatusBadRequest)
			return
		}
	})
	mux.HandleFunc("/fresh", func(w http.ResponseWriter, r *http.Request) {
		if !r.Close {
			http.Error(w, "kept alive", http.StatusBadRequest)
			return
		}
	})
	mux.HandleFunc("POST /post", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		for i := range 4 {
			w.Header().Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("x", maxHeaderBytes/2))
		}
	})
	return mux
}

// allGoodMD5 is what genhash prints for the body of /ok, "all good"; fullMD5 for /full's.
var (
	allGoodMD5 = "7bc22c8cd42ff8a897538a6fd9851958" // echo -n "all good" | md5sum
	fullMD5    = fmt.Sprintf("%x", md5.Sum([]byte(strings.Repeat("x", maxBodyScan))))
)

func TestHTTP(t *testing.T) {
	forEachLoopback(t, func(t *testing.T, loopback netip.Addr) {
		target := serveHTTP(t, loopback, false, healthHandler())
		for _, tc := range []struct {
			name string
			hc   config.HealthCheck
			ok   bool
			want string
		}{
			{"200 passes", config.HealthCheck{Path: "/ok"}, true, "status 200"},
			{"503 fails", config.HealthCheck{Path: "/broken"}, false, "status 503, want 200-399"},
			{"503 in expected range", config.HealthCheck{Path: "/broken",
				ExpectStatus: []config.Range{{First: 200, Last: 200}, {First: 500, Last: 599}}}, true, "status 503"},
			{"404 not in expected list", config.HealthCheck{Path: "/missing",
				ExpectStatus: []config.Range{{First: 200, Last: 299}, {First: 302, Last: 302}}},
				false, "status 404, want 200-299,302"},
			{"redirect judged, not followed", config.HealthCheck{Path: "/moved"}, true, "status 302"},
			{"redirect not expected", config.HealthCheck{Path: "/moved",
				ExpectStatus: []config.Range{{First: 200, Last: 200}}}, false, "status 302, want 200"},
			{"body found", config.HealthCheck{Path: "/ok", ExpectBody: "good"}, true, "status 200"},
			{"body missing", config.HealthCheck{Path: "/ok", ExpectBody: "bad"}, false, `body lacks "bad"`},
			{"body beyond 64 KiB", config.HealthCheck{Path: "/big", ExpectBody: "marker"}, false, "body lacks"},
			{"digest matches", config.HealthCheck{Path: "/ok", ExpectDigest: allGoodMD5},
				true, "status 200"},
			{"digest and body", config.HealthCheck{Path: "/ok", ExpectBody: "good", ExpectDigest: allGoodMD5},
				true, "status 200"},
			{"digest differs", config.HealthCheck{Path: "/ok", ExpectDigest: "00000000000000000000000000000000"},
				false, "body digest " + allGoodMD5 + ", want 00000000000000000000000000000000"},
			{"digest in capitals", config.HealthCheck{Path: "/ok", ExpectDigest: strings.ToUpper(allGoodMD5)},
				true, "status 200"},
			{"digest of a body beyond 64 KiB", config.HealthCheck{Path: "/big", ExpectDigest: allGoodMD5},
				false, "body longer than 64 KiB"},
			{"digest of a body of 64 KiB", config.HealthCheck{Path: "/full", ExpectDigest: fullMD5},
				true, "status 200"},
			{"host header", config.HealthCheck{Path: "/vhost", Host: "health.example"}, true, "status 200"},
			{"no host header", config.HealthCheck{Path: "/vhost"}, false, "status 421"},
			{"one connection per probe", config.HealthCheck{Path: "/fresh"}, true, "status 200"},
			{"query kept", config.HealthCheck{Path: "/query?deep=1"}, true, "status 200"},
			{"method", config.HealthCheck{Path: "/post", Method: "POST"}, true, "status 200"},
			{"wrong method", config.HealthCheck{Path: "/post", Method: "GET"}, false, "status 405"},
			{"head", config.HealthCheck{Path: "/ok", Method: "HEAD"}, true, "status 200"},
			{"headers beyond 64 KiB", config.HealthCheck{Path: "/headers"}, false, "headers exceeded 65536 bytes"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.hc.Type = "http"
				wantResult(t, check(t, tc.hc, target, probeTimeout), tc.ok, tc.want)
			})
		}
		t.Run("closed port", func(t *testing.T) {
			r := check(t, config.HealthCheck{Type: "http"}, closedPort(t, "tcp", loopback), probeTimeout)
			wantResult(t, r, false, "connection refused")
		})
	})
}

func TestHTTPS(t *testing.T) {
	forEachLoopback(t, func(t *testing.T, loopback netip.Addr) {
		target := serveHTTP(t, loopback, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.TLS.ServerName != "health.example":
				http.Error(w, "wrong server name", http.StatusMisdirectedRequest)
			case !strings.HasPrefix(r.Host, "health.example"):
				http.Error(w, "wrong host", http.StatusBadRequest)
			}
		}))
		for _, tc := range []struct {
			name string
			hc   config.HealthCheck
			ok   bool
			want string
		}{
			{"untrusted certificate", config.HealthCheck{Host: "health.example"}, false, "certificate"},
			{"insecure with host", config.HealthCheck{Host: "health.example", InsecureSkipVerify: true},
				true, "status 200"},
			{"server name without the host's port", config.HealthCheck{Host: "health.example:8443",
				InsecureSkipVerify: true}, true, "status 200"},
			{"insecure without host", config.HealthCheck{InsecureSkipVerify: true}, false, "status 421"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.hc.Type = "https"
				wantResult(t, check(t, tc.hc, target, probeTimeout), tc.ok, tc.want)
			})
		}
	})
}
