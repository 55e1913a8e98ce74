package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// seed is one input of a fuzz seed corpus.
type seed struct{ contentType, body string }

// fuzzRoute fuzzes the body and Content-Type of one route: whatever they are, the handler does
// not panic, answers JSON, and an answer other than 2xx leaves the running config as it was.
// After a 2xx each of accepted runs, then the base config is put back, so that every input meets
// the same state.
func fuzzRoute(f *testing.F, method, path string, seeds []seed, accepted ...func(*testing.T, *fixture)) {
	fx := newFixture(f)
	base := fx.engine.Config()
	for _, s := range seeds {
		f.Add(s.contentType, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		before := fx.engine.Config()
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		fx.handler.ServeHTTP(rec, req)
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s answered %d with invalid JSON: %q", method, path, rec.Code, rec.Body)
		}
		if rec.Code >= 300 {
			if !reflect.DeepEqual(before, fx.engine.Config()) {
				t.Fatalf("%s %s answered %d but changed the running config", method, path, rec.Code)
			}
			return
		}
		for _, check := range accepted {
			check(t, fx)
		}
		if _, err := fx.engine.Replace(false, "fuzz: back to the base config", base); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzAddService(f *testing.F) {
	fuzzRoute(f, http.MethodPost, "/v1/services", []seed{
		{mediaJSON, `{"name": "api", "vip": "192.0.2.20", "port": 443, "backends": [{"address": "10.0.2.1", "port": 8443, "weight": 2}]}`},
		{mediaJSON, `{"name": "range", "vip": "192.0.2.21", "port": "8000-8010", "protocol": "udp", "backends": [{"address": "10.0.2.1"}]}`},
		{mediaJSON, `{"name": "dsr", "vip": "192.0.2.22", "port": 80, "mode": "dsr", "flow_timeout": "1m", "backends": [{"address": "10.0.2.1"}]}`},
		{mediaJSON, `{"name": "hc", "vip": "192.0.2.23", "port": 80, "health_check": {"type": "http", "path": "/healthz", "expect_status": [200, "300-399"]}, "backends": [{"address": "10.0.2.1"}]}`},
		{mediaJSON, `{"name": "sorry", "vip": "192.0.2.24", "port": 80, "fallback": "sorry", "sorry_servers": [{"address": "10.0.9.9"}]}`},
		{mediaJSON, `{"name": "web", "vip": "192.0.2.10", "port": 80, "backends": [{"address": "10.0.0.1"}]}`},
		{mediaJSON, `{"name": "api", "vip": "192.0.2.20", "port": "http", "backends": [{"address": "10.0.2", "weight": 5000}]}`},
		{mediaJSON, `{"name": "api", "vip": "192.0.2.20", "port": true}`},
		{mediaJSON, `{"name": "api", "colour": "red"}`},
		{mediaJSON, `{"name": "api"} {}`},
		{mediaJSON, `[{"name": "api"}]`},
		{mediaJSON, `null`},
		{mediaJSON, ``},
		{"application/yaml", `name: api`},
	})
}

func FuzzAddBackend(f *testing.F) {
	fuzzRoute(f, http.MethodPost, "/v1/services/web/backends", []seed{
		{mediaJSON, `{"address": "10.0.0.9", "port": 8080, "weight": 3}`},
		{mediaJSON, `{"address": "10.0.0.9"}`},
		{mediaJSON, `{"address": "10.0.0.1", "port": 8080}`},
		{mediaJSON, `{"address": "10.0.0.9", "weight": 5000}`},
		{mediaJSON, `{"address": "10.0.0", "port": 8080}`},
		{mediaJSON, `{"address": "10.0.0.9", "port": "http"}`},
		{mediaJSON, `{"address": "fd00::9", "port": 70000}`},
		{mediaJSON, `{"address": "10.0.0.9", "mac": "x"}`},
		{mediaJSON, `{"address": "10.0.0.9"}}`},
		{"text/plain", `{"address": "10.0.0.9"}` + "\x00"},
	})
}

func FuzzSetWeight(f *testing.F) {
	fuzzRoute(f, http.MethodPatch, "/v1/services/web/backends/10.0.0.1:8080", []seed{
		{mediaJSON, `{"weight": 3}`},
		{mediaJSON, `{"weight": 0}`},
		{mediaJSON, `{"weight": 5000}`},
		{mediaJSON, `{"weight": -1}`},
		{mediaJSON, `{"weight": "3"}`},
		{mediaJSON, `{"weight": 1.5}`},
		{mediaJSON, `{"weight": null}`},
		{mediaJSON, `{}`},
		{mediaJSON, `{"weight": 2, "port": 81}`},
		{mediaJSON, `{"weight": 2} trailing`},
		{"application/json; charset=utf-8", `{"weight": 99999999999999}`},
	})
}

func FuzzPutConfig(f *testing.F) {
	asJSON, err := json.Marshal(mustParse(f, baseConfig))
	if err != nil {
		f.Fatal(err)
	}
	fuzzRoute(f, http.MethodPut, "/v1/config", []seed{
		{"application/yaml", baseConfig},
		{"application/yaml", baseConfig + "---\n" + baseConfig},
		{"text/yaml", baseConfig + "colour: red\n"},
		{"application/x-yaml", "services: []\n"},
		{"application/yaml", "services: [\n"},
		{"application/yaml", "services:\n  - name: x\n    port: &a [*a]\n"},
		{mediaJSON, string(asJSON)},
		{mediaJSON, `{"services": [], "colour": "red"}`},
		{mediaJSON, `{"services": [{"name": "x", "vip": "192.0.2.1", "port": 0, "fallback": "drop"}]}`},
		{mediaJSON, `{"services": null}`},
		{mediaJSON, ``},
		{"application/yaml", baseConfig + "  - {name: empty-lists, vip: 192.0.2.99, port: 80, source_allow: [], sorry_servers: [], backends: [{address: 10.0.9.1}]}\n"},
	}, putsBackAsRead)
}

// putsBackAsRead checks that the running config, read from the API as JSON and as YAML, is
// taken back as it is and changes nothing: what a client that edits the config it got relies on.
func putsBackAsRead(t *testing.T, fx *fixture) {
	running := fx.engine.Config()
	for _, format := range []struct{ query, media string }{{"json", mediaJSON}, {"yaml", "application/yaml"}} {
		rec := httptest.NewRecorder()
		fx.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/config?format="+format.query, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /v1/config?format=%s: %d %s", format.query, rec.Code, rec.Body)
		}
		read := rec.Body.Bytes()
		req := httptest.NewRequest(http.MethodPut, "/v1/config", bytes.NewReader(read))
		req.Header.Set("Content-Type", format.media)
		rec = httptest.NewRecorder()
		fx.handler.ServeHTTP(rec, req)
		if rec.Code >= 300 {
			t.Fatalf("the running config put back as read in %s: %d %s\n%s", format.query, rec.Code, rec.Body, read)
		}
		if !reflect.DeepEqual(running, fx.engine.Config()) {
			t.Fatalf("the running config put back as read in %s changed it\n%s", format.query, read)
		}
	}
}

// decodeAllocBound is the most heap decodeJSON may allocate for a body of n bytes: a decoded
// config takes room in proportion to its text, up to about 800 bytes a byte for a list of empty
// services ({}, 3 bytes, is a whole Service, and the list grows by doubling; MaxJSONObjects caps
// the whole), but nesting and repeated keys take none.
func decodeAllocBound(n int) uint64 { return 1<<20 + 1024*uint64(n) }

// FuzzDecodeJSON decodes any body as a whole config: it does not panic, refuses with a 400 (an
// *Error) and allocates in proportion to the body, however deep it nests or however many keys
// repeat.
func FuzzDecodeJSON(f *testing.F) {
	for _, body := range []string{
		`{"services": []}`,
		strings.Repeat("[", 4096),
		strings.Repeat(`{"a":`, 4096),
		`{"services":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		`{"services": [{"name": "a", "backends": [{"address": "10.0.0.1", "weight": 1, "weight": 2}]}]}`,
		`{"services": [{"name": "a", "NAME": "b"}]}`,
		`{"Services": [], "services": []}`,
		`{"bgp": {"peers": [{"address": "10.0.0.1"}, {"address": "10.0.0.2", "Address": "x"}]}}`,
		`{"a": "[[[[{{{{\"", "services": []}`,
		`{"services": [` + strings.Repeat(`{},`, 1000) + `{}]}`,
		`{"services": null} {}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var cfg config.Config
		var err error
		if n := testutil.Allocated(func() { err = decodeJSON(body, &cfg) }); n > decodeAllocBound(len(body)) {
			t.Fatalf("decoding %d bytes allocated %d bytes, more than %d", len(body), n, decodeAllocBound(len(body)))
		}
		var answer *Error
		if err != nil && (!errors.As(err, &answer) || answer.Status != http.StatusBadRequest) {
			t.Fatalf("%v (%T), want a 400 *Error", err, err)
		}
	})
}
