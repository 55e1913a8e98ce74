package api

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// validChanges is, for every route that changes something, a request that the route accepts and
// that changes something: the path and the body.
var validChanges = map[string]struct{ path, body string }{
	"POST /v1/services":                                 {"/v1/services", `{"name": "api", "vip": "192.0.2.20", "port": 443, "backends": [{"address": "10.0.2.1"}]}`},
	"PUT /v1/services/{name}":                           {"/v1/services/web", `{"vip": "192.0.2.10", "port": 80, "backends": [{"address": "10.0.0.9"}]}`},
	"DELETE /v1/services/{name}":                        {"/v1/services/web", ``},
	"POST /v1/services/{name}/backends":                 {"/v1/services/web/backends", `{"address": "10.0.0.9", "port": 8080}`},
	"PATCH /v1/services/{name}/backends/{backend}":      {"/v1/services/web/backends/10.0.0.1:8080", `{"weight": 7}`},
	"DELETE /v1/services/{name}/backends/{backend}":     {"/v1/services/web/backends/10.0.0.1:8080", ``},
	"POST /v1/services/{name}/backends/{backend}/drain": {"/v1/services/web/backends/10.0.0.1:8080/drain", `{"timeout": "1m"}`},
	"PUT /v1/config":                                    {"/v1/config", `{"services": []}`},
	"POST /v1/plan":                                     {"/v1/plan", `{"services": []}`},
	"POST /v1/reload":                                   {"/v1/reload", ``},
	"POST /v1/node/drain":                               {"/v1/node/drain", `{"timeout": "1m"}`},
	"POST /v1/node/undrain":                             {"/v1/node/undrain", ``},
}

// TestBadQueryChangesNothing sends every route that changes something a valid request with a bad
// query parameter: each is a 400 naming the parameter, and the running config, the drains and
// the node's state stay as they were.
func TestBadQueryChangesNothing(t *testing.T) {
	f := newFixture(t)
	// The reload would change the config: the file differs from the running config.
	if _, err := f.client.RemoveService(t.Context(), "dns", false); err != nil {
		t.Fatal(err)
	}
	before, node := f.engine.Config(), f.engine.Node()
	bad := map[string]string{ // query: the field the answer names
		"dry_run=maybe":          "dry_run",
		"wait=nope":              "wait",
		"wait=":                  "",
		"dryrun=true":            "dryrun",
		"wait=true&wait=false":   "wait",
		"wait=%zz":               "",
		"dry_run=true;wait=true": "",
	}
	for _, rt := range (&server{}).routes() {
		method, _, _ := strings.Cut(rt.pattern, " ")
		if method == http.MethodGet {
			continue
		}
		req, ok := validChanges[rt.pattern]
		if !ok {
			t.Errorf("%s changes something but has no request in validChanges", rt.pattern)
			continue
		}
		for query, field := range bad {
			if query == "wait=" || query == "dry_run=maybe" && !strings.Contains(strings.Join(rt.query, ","), "dry_run") {
				continue // an empty value is the default; dry_run is unknown where it is not taken
			}
			r := httptest.NewRequest(method, req.path+"?"+query, strings.NewReader(req.body))
			if req.body != "" {
				r.Header.Set("Content-Type", mediaJSON)
			}
			rec := httptest.NewRecorder()
			f.handler.ServeHTTP(rec, r)
			if rec.Code != http.StatusBadRequest || field != "" && !strings.Contains(rec.Body.String(), `"field":"`+field+`"`) {
				t.Errorf("%s ?%s: %d %s, want 400 naming %q", rt.pattern, query, rec.Code, rec.Body, field)
			}
			if after := f.engine.Config(); !reflect.DeepEqual(before, after) {
				t.Fatalf("%s ?%s answered %d but changed the running config", rt.pattern, query, rec.Code)
			}
			if drains := f.engine.Drains(); len(drains) > 0 {
				t.Fatalf("%s ?%s answered %d but started a drain", rt.pattern, query, rec.Code)
			}
			if after := f.engine.Node(); after.State != node.State {
				t.Fatalf("%s ?%s answered %d but the node went %s", rt.pattern, query, rec.Code, after.State)
			}
		}
	}
}

// TestValidChangesChange checks that the requests of validChanges are accepted as they are, so
// that TestBadQueryChangesNothing tells the query from the rest of the request.
func TestValidChangesChange(t *testing.T) {
	for pattern, req := range validChanges {
		f := newFixture(t)
		method, _, _ := strings.Cut(pattern, " ")
		if method == http.MethodPost && req.path == "/v1/reload" {
			if _, err := f.client.RemoveService(t.Context(), "dns", false); err != nil {
				t.Fatal(err)
			}
		}
		r := httptest.NewRequest(method, req.path+"?wait=false", strings.NewReader(req.body))
		if req.body != "" {
			r.Header.Set("Content-Type", mediaJSON)
		}
		rec := httptest.NewRecorder()
		f.handler.ServeHTTP(rec, r)
		if rec.Code >= 300 {
			t.Errorf("%s: %d %s", pattern, rec.Code, rec.Body)
		}
	}
}
