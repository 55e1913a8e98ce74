package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// deepBodies are bodies of MaxBodyBytes that nest far deeper than MaxJSONDepth.
func deepBodies() map[string]string {
	return map[string]string{
		"arrays":          strings.Repeat("[", MaxBodyBytes),
		"objects":         strings.Repeat(`{"a":`, MaxBodyBytes/5),
		"arrays in a key": `{"services":` + strings.Repeat("[", MaxBodyBytes-20),
		"mixed":           strings.Repeat(`{"a":[`, MaxBodyBytes/6),
	}
}

// TestDeepJSONIsRefusedCheaply checks that a body nesting deeper than MaxJSONDepth is a 400 naming
// the limit, found without tokenizing it: the heap hardly grows, however deep it goes.
func TestDeepJSONIsRefusedCheaply(t *testing.T) {
	const bound = 1 << 20
	for name, body := range deepBodies() {
		data := []byte(body)
		var err error
		var cfg config.Config
		if n := testutil.Allocated(func() { err = decodeJSON(data, &cfg) }); n > bound {
			t.Errorf("%s: decoding %d bytes allocated %d bytes, want at most %d", name, len(data), n, bound)
		}
		var answer *Error
		if !errors.As(err, &answer) || answer.Status != http.StatusBadRequest || !strings.Contains(answer.Message, fmt.Sprint(MaxJSONDepth)) {
			t.Errorf("%s: %v, want a 400 naming the depth limit %d", name, err, MaxJSONDepth)
		}
	}
}

// TestManyObjectsAreRefusedCheaply: a megabyte of empty objects, each of which would decode into
// a whole service, is a 400 naming MaxJSONObjects, found before decoding; a body just under the
// limit decodes, and costs what its objects cost.
func TestManyObjectsAreRefusedCheaply(t *testing.T) {
	body := []byte(`{"services":[` + strings.TrimSuffix(strings.Repeat("{},", (MaxBodyBytes-20)/3), ",") + `]}`)
	var err error
	var cfg config.Config
	if n := testutil.Allocated(func() { err = decodeJSON(body, &cfg) }); n > 1<<20 {
		t.Errorf("decoding %d bytes of empty objects allocated %d bytes, want at most 1 MiB", len(body), n)
	}
	var answer *Error
	if !errors.As(err, &answer) || answer.Status != http.StatusBadRequest || !strings.Contains(answer.Message, fmt.Sprint(MaxJSONObjects)) {
		t.Errorf("%v, want a 400 naming the object limit %d", err, MaxJSONObjects)
	}
	backends := `{"services":[{"name":"web","backends":[` + strings.TrimSuffix(strings.Repeat(`{"address":"10.1.0.1:80"},`, MaxJSONObjects-2), ",") + `]}]}`
	if err := decodeJSON([]byte(backends), &cfg); err != nil {
		t.Errorf("a body of %d objects: %v", MaxJSONObjects, err)
	}
}

// TestDeepJSONOverTheAPI sends the deep bodies to every JSON route: each is a 400 naming the
// depth limit, and nothing changes.
func TestDeepJSONOverTheAPI(t *testing.T) {
	f := newFixture(t)
	before := f.engine.Config()
	routes := []struct{ method, path string }{
		{http.MethodPost, "/v1/services"},
		{http.MethodPut, "/v1/services/web"},
		{http.MethodPost, "/v1/services/web/backends"},
		{http.MethodPatch, "/v1/services/web/backends/10.0.0.1:8080"},
		{http.MethodPost, "/v1/services/web/backends/10.0.0.1:8080/drain"},
		{http.MethodPut, "/v1/config"},
		{http.MethodPost, "/v1/plan"},
		{http.MethodPost, "/v1/node/drain"},
	}
	for name, body := range deepBodies() {
		for _, rt := range routes {
			req := httptest.NewRequest(rt.method, rt.path, strings.NewReader(body))
			req.Header.Set("Content-Type", mediaJSON)
			rec := httptest.NewRecorder()
			f.handler.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "32 deep") {
				t.Errorf("%s %s with %s: %d %s, want 400 naming the depth limit", rt.method, rt.path, name, rec.Code, rec.Body)
			}
		}
	}
	if after := f.engine.Config(); !reflect.DeepEqual(before, after) {
		t.Error("a deep body changed the running config")
	}
}

// TestDuplicateKeyPaths checks the path a duplicate key is named by, at every depth.
func TestDuplicateKeyPaths(t *testing.T) {
	for body, want := range map[string]string{
		`{"a": 1, "A": 2}`:                                              "A",
		`{"a": {"b": 1, "b": 2}}`:                                       "a.b",
		`{"a": [1, {"x": 1}, {"x": 1, "X": 2}]}`:                        "a[2].X",
		`{"a": [[{}], [{"k": "[{", "k": 0}]]}`:                          "a[1][0].k",
		`{"s": "\"{", "b": [{"c": {"d": 1}}, {"c": {"d": 1, "d": 2}}]}`: "b[1].c.d",
	} {
		path, _, dup := duplicateKey([]byte(body))
		if !dup || path != want {
			t.Errorf("%s: %q %v, want %q", body, path, dup, want)
		}
	}
	for _, body := range []string{`{"a": 1, "b": {"a": 1}}`, `{"a": [{"k": 1}, {"k": 1}]}`, `{"a": "a", "b": "a"}`} {
		if path, _, dup := duplicateKey([]byte(body)); dup {
			t.Errorf("%s: a duplicate at %q", body, path)
		}
	}
}
