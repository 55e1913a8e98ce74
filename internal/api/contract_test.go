package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

func init() {
	// kin-openapi knows application/yaml; the API also reads text/yaml.
	openapi3filter.RegisterBodyDecoder("text/yaml", openapi3filter.YamlBodyDecoder)
}

// loadDocument parses and validates openapi.yaml once.
var loadDocument = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openAPIDocument)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

func TestOpenAPIDocumentIsValid(t *testing.T) {
	if _, err := loadDocument(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	routed := map[string]bool{}
	for _, rt := range (&server{}).routes() {
		routed[rt.pattern] = true
		if !documented[rt.pattern] {
			t.Errorf("%s is routed but not in openapi.yaml", rt.pattern)
		}
	}
	var missing []string
	for op := range documented {
		if !routed[op] {
			missing = append(missing, op)
		}
	}
	sort.Strings(missing)
	for _, op := range missing {
		t.Errorf("%s is in openapi.yaml but not routed", op)
	}
}

// contract is an http.RoundTripper that checks every exchange against openapi.yaml: the answer
// must be documented for its route and status and match its schema, and a request the server
// accepted (2xx) must match the document too. A request the server rejects may break the
// document: the tests send broken requests on purpose.
type contract struct {
	t      testing.TB
	next   http.RoundTripper
	router routers.Router
}

func contractChecker(t testing.TB, next http.RoundTripper) http.RoundTripper {
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{t: t, next: next, router: router}
}

func (c *contract) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		data, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = data
	}
	sent := req.Clone(req.Context())
	sent.Body = io.NopCloser(bytes.NewReader(reqBody))
	resp, err := c.next.RoundTrip(sent)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	c.check(req, reqBody, resp, respBody)
	return resp, nil
}

func (c *contract) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	c.t.Helper()
	ctx := context.Background()
	probe := req.Clone(ctx)
	probe.Body = io.NopCloser(bytes.NewReader(reqBody))
	name := req.Method + " " + req.URL.RequestURI()
	route, params, err := c.router.FindRoute(probe)
	if err != nil {
		c.t.Errorf("%s: no route in openapi.yaml: %v", name, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && resp.StatusCode < 300 {
		c.t.Errorf("%s answered %d, but openapi.yaml rejects the request %s: %v", name, resp.StatusCode, reqBody, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		c.t.Errorf("%s: answer %d does not match openapi.yaml: %v\n%s", name, resp.StatusCode, err, respBody)
	}
}
