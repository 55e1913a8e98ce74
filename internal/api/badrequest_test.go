package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestBadRequestsChangeNothing sends broken requests: each gets its exact status and names the
// field, and leaves the running config and the datapath as they were.
func TestBadRequestsChangeNothing(t *testing.T) {
	const (
		services = "/v1/services"
		backends = "/v1/services/web/backends"
		backend  = "/v1/services/web/backends/10.0.0.1:8080"
		yaml     = "application/yaml"
	)
	validService := `{"name": "api", "vip": "192.0.2.20", "port": 443, "backends": [{"address": "10.0.2.1"}]}`
	oversize := `{"address": "` + strings.Repeat("1", MaxBodyBytes) + `"}`
	f := newFixture(t)
	badWeightYAML := strings.Replace(baseConfig, "{address: 10.0.0.2, port: 8080}", "{address: 10.0.0.2, port: 8080, weight: 5000}", 1)
	badAddressYAML := strings.Replace(baseConfig, "{address: 10.0.0.2, port: 8080}", "{address: 10.0.0, port: 8080}", 1)
	for _, tc := range []struct {
		name        string
		method      string
		path        string
		contentType string
		body        string
		status      int
		field       string
		line        int // of the first error, for YAML
	}{
		{"unknown field", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"name"`, `"colour": "red", "name"`, 1), 400, "colour", 0},
		{"unknown nested field", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"address"`, `"mac": "x", "address"`, 1), 400, "mac", 0},
		{"wrong type", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "table_size": "big"`, 1), 400, "table_size", 0},
		{"wrong nested type", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"address": "10.0.2.1"`, `"address": "10.0.2.1", "weight": "5"`, 1), 400, "backends[0].weight", 0},
		{"port as a name", http.MethodPost, services, mediaJSON, strings.Replace(validService, `443`, `"https"`, 1), 400, "port", 0},
		{"port as a boolean", http.MethodPost, services, mediaJSON, strings.Replace(validService, `443`, `true`, 1), 400, "port", 0},
		{"invalid nested weight", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"10.0.2.1"`, `"10.0.2.1", "weight": 5000`, 1), 400, "backends[0].weight", 0},
		{"bad vip", http.MethodPost, services, mediaJSON, strings.Replace(validService, "192.0.2.20", "192.0.2", 1), 400, "vip", 0},
		{"vip as a number", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"192.0.2.20"`, "3221225492", 1), 400, "vip", 0},
		{"source_allow entry with host bits", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port"`, `"source_allow": ["10.0.0.1/8"], "port"`, 1), 400, "source_allow[0]", 0},
		{"existing vip and port", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"192.0.2.20", "port": 443`, `"192.0.2.10", "port": 80`, 1), 400, "", 0},
		{"service conflict", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"api"`, `"web"`, 1), 409, "", 0},
		{"not an object", http.MethodPost, services, mediaJSON, `[` + validService + `]`, 400, "", 0},
		{"null", http.MethodPost, services, mediaJSON, `null`, 400, "", 0},
		{"trailing garbage", http.MethodPost, services, mediaJSON, validService + ` x`, 400, "", 0},
		{"two values", http.MethodPost, services, mediaJSON, validService + validService, 400, "", 0},
		{"truncated", http.MethodPost, services, mediaJSON, validService[:20], 400, "", 0},
		{"empty body", http.MethodPost, services, mediaJSON, ``, 400, "", 0},
		{"flows limit", http.MethodGet, "/v1/services/web/flows?limit=0", "", "", 400, "limit", 0},
		{"flows backend", http.MethodGet, "/v1/services/web/flows?backend=10.0.0", "", "", 400, "backend", 0},
		{"wrong content type", http.MethodPost, services, "text/plain", validService, 415, "", 0},
		{"form", http.MethodPost, services, "application/x-www-form-urlencoded", `name=api`, 415, "", 0},
		{"bad dry_run", http.MethodPost, services + "?dry_run=maybe", mediaJSON, validService, 400, "dry_run", 0},
		{"name differs from path", http.MethodPut, services + "/web", mediaJSON, strings.Replace(validService, `"api"`, `"www"`, 1), 400, "name", 0},
		{"invalid name in path", http.MethodPut, services + "/9lives", mediaJSON, strings.Replace(validService, `"name": "api", `, ``, 1), 400, "name", 0},
		{"duplicate key", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "port": 80`, 1), 400, "port", 0},
		{"duplicate key in another case", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "PORT": 80`, 1), 400, "PORT", 0},
		{"duplicate nested key", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"10.0.2.1"`, `"10.0.2.1", "weight": 1, "weight": 0`, 1), 400, "backends[0].weight", 0},
		{"ipv4-mapped vip on an existing service", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"192.0.2.20", "port": 443`, `"::ffff:192.0.2.10", "port": 80`, 1), 400, "", 0},
		{"table_size not a prime", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "table_size": 1000`, 1), 400, "table_size", 0},
		{"table_size too large", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "table_size": 2000003`, 1), 400, "table_size", 0},
		{"crlf in a check's path", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "health_check": {"type": "http", "path": "/x\r\nX-Injected: 1"}`, 1), 400, "health_check.path", 0},
		{"crlf in a check's host", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "health_check": {"type": "http", "host": "a\r\nX-Injected: 1"}`, 1), 400, "health_check.host", 0},
		{"broadcast vip", http.MethodPost, services, mediaJSON, strings.Replace(validService, "192.0.2.20", "255.255.255.255", 1), 400, "vip", 0},
		{"exec check over tcp", http.MethodPost, services, mediaJSON, strings.Replace(validService, `"port": 443`, `"port": 443, "health_check": {"type": "exec", "command": ["sh", "-c", "id"]}`, 1), 403, "health_check.command", 0},
		{"exec check on a file's service over tcp", http.MethodPut, services + "/web", mediaJSON, `{"vip": "192.0.2.10", "port": 80, "health_check": {"type": "exec", "command": ["id"]}, "backends": [{"address": "10.0.0.1"}]}`, 403, "health_check.command", 0},

		{"backend weight 5000", http.MethodPost, backends, mediaJSON, `{"address": "10.0.0.9", "port": 8080, "weight": 5000}`, 400, "weight", 0},
		{"backend bad address", http.MethodPost, backends, mediaJSON, `{"address": "10.0.0", "port": 8080}`, 400, "address", 0},
		{"backend address as a list", http.MethodPost, backends, mediaJSON, `{"address": ["10.0.0.9"], "port": 8080}`, 400, "address", 0},
		{"backend port as a name", http.MethodPost, backends, mediaJSON, `{"address": "10.0.0.9", "port": "http"}`, 400, "port", 0},
		{"backend port out of range", http.MethodPost, backends, mediaJSON, `{"address": "10.0.0.9", "port": 70000}`, 400, "port", 0},
		{"backend of another family", http.MethodPost, backends, mediaJSON, `{"address": "fd00::9"}`, 400, "address", 0},
		{"backend conflict", http.MethodPost, backends, mediaJSON, `{"address": "10.0.0.1", "port": 8080}`, 409, "", 0},
		{"backend conflict ipv4-mapped", http.MethodPost, backends, mediaJSON, `{"address": "::ffff:10.0.0.1", "port": 8080}`, 409, "", 0},
		{"backend at another service's vip", http.MethodPost, backends, mediaJSON, `{"address": "192.0.2.53"}`, 400, "address", 0},
		{"backend at the broadcast address", http.MethodPost, backends, mediaJSON, `{"address": "255.255.255.255"}`, 400, "address", 0},
		{"backend duplicate key", http.MethodPost, backends, mediaJSON, `{"address": "10.0.0.9", "address": "10.0.0.8"}`, 400, "address", 0},
		{"backend of a missing service", http.MethodPost, "/v1/services/nope/backends", mediaJSON, `{"address": "10.0.0.9"}`, 404, "", 0},
		{"backend oversize", http.MethodPost, backends, mediaJSON, oversize, 413, "", 0},

		{"weight 5000", http.MethodPatch, backend, mediaJSON, `{"weight": 5000}`, 400, "weight", 0},
		{"weight -1", http.MethodPatch, backend, mediaJSON, `{"weight": -1}`, 400, "weight", 0},
		{"weight as text", http.MethodPatch, backend, mediaJSON, `{"weight": "5"}`, 400, "weight", 0},
		{"weight fraction", http.MethodPatch, backend, mediaJSON, `{"weight": 1.5}`, 400, "weight", 0},
		{"weight missing", http.MethodPatch, backend, mediaJSON, `{}`, 400, "weight", 0},
		{"patch of another field", http.MethodPatch, backend, mediaJSON, `{"weight": 2, "port": 81}`, 400, "port", 0},
		{"patch trailing garbage", http.MethodPatch, backend, mediaJSON, `{"weight": 2} }`, 400, "", 0},
		{"patch empty body", http.MethodPatch, backend, mediaJSON, ``, 400, "", 0},
		{"patch of a missing backend", http.MethodPatch, "/v1/services/web/backends/10.0.0.9:8080", mediaJSON, `{"weight": 2}`, 404, "", 0},
		{"patch of a malformed reference", http.MethodPatch, "/v1/services/web/backends/not-an-ip", mediaJSON, `{"weight": 2}`, 400, "backend", 0},

		{"yaml invalid weight", http.MethodPut, "/v1/config", yaml, badWeightYAML, 400, "services[0].backends[1].weight", 9},
		{"yaml bad address", http.MethodPut, "/v1/config", yaml, badAddressYAML, 400, "services[0].backends[1].address", 9},
		{"yaml unknown key", http.MethodPut, "/v1/config", yaml, baseConfig + "colour: red\n", 400, "colour", 18},
		{"yaml two documents", http.MethodPut, "/v1/config", yaml, baseConfig + "---\n" + baseConfig, 400, "", 0},
		{"yaml {}", http.MethodPut, "/v1/config", yaml, "{}\n", 400, "services", 0},
		{"yaml null", http.MethodPut, "/v1/config", yaml, "null\n", 400, "services", 0},
		{"yaml interface name", http.MethodPut, "/v1/config", yaml, "interfaces: [\"x;flush ruleset\"]\n" + baseConfig, 400, "interfaces[0]", 1},
		{"yaml api section over tcp", http.MethodPut, "/v1/config", yaml, "api: {allow_exec_checks: true}\n" + baseConfig, 403, "api", 0},
		{"json config {}", http.MethodPut, "/v1/config", mediaJSON, `{}`, 400, "services", 0},
		{"json config null services", http.MethodPut, "/v1/config", mediaJSON, `{"services": null}`, 400, "services", 0},
		{"json config duplicate key", http.MethodPut, "/v1/config", mediaJSON, `{"services": [], "services": []}`, 400, "services", 0},
		{"json config interface name", http.MethodPut, "/v1/config", mediaJSON, `{"interfaces": ["eth0", "x;flush ruleset"], "services": []}`, 400, "interfaces[1]", 0},
		{"plan of an exec check over tcp", http.MethodPost, "/v1/plan", mediaJSON, `{"services": [{"name": "x", "vip": "192.0.2.1", "port": 1, "fallback": "drop", "health_check": {"type": "exec", "command": ["id"]}}]}`, 403, "services[0].health_check.command", 0},
		{"yaml syntax", http.MethodPut, "/v1/config", yaml, "services: [", 400, "", 0},
		{"yaml empty", http.MethodPut, "/v1/config", yaml, "", 400, "", 0},
		{"json config unknown field", http.MethodPut, "/v1/config", mediaJSON, `{"services": [], "colour": "red"}`, 400, "colour", 0},
		{"json config invalid", http.MethodPut, "/v1/config", mediaJSON, `{"services": [{"name": "x", "vip": "192.0.2.1", "port": 0, "fallback": "drop"}]}`, 400, "services[0].port", 0},
		{"config content type", http.MethodPut, "/v1/config", "text/csv", "a,b", 415, "", 0},
		{"plan of an invalid config", http.MethodPost, "/v1/plan", yaml, badWeightYAML, 400, "services[0].backends[1].weight", 9},
		{"plan of two values", http.MethodPost, "/v1/plan", mediaJSON, `{}{}`, 400, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, applies, programmed := f.engine.Config(), f.dp.Applies(), f.dp.Plan()
			code, body := f.do(t, tc.method, tc.path, tc.contentType, []byte(tc.body))
			e := decodeError(t, body)
			if code != tc.status || e.Field != tc.field {
				t.Errorf("%s %s = %d %s, want %d naming field %q", tc.method, tc.path, code, body, tc.status, tc.field)
			}
			if tc.field != "" && !strings.Contains(e.Message, tc.field) {
				t.Errorf("the message %q does not name the field %q", e.Message, tc.field)
			}
			if tc.line != 0 && (len(e.Errors) == 0 || e.Errors[0].Line != tc.line) {
				t.Errorf("errors = %+v, want the first at line %d", e.Errors, tc.line)
			}
			if !reflect.DeepEqual(before, f.engine.Config()) {
				t.Error("the running config changed")
			}
			if f.dp.Applies() != applies || !reflect.DeepEqual(f.dp.Plan(), programmed) {
				t.Error("the datapath was applied")
			}
		})
	}
}

// decodeError decodes an error answer; a success answer decodes to an empty Error.
func decodeError(t *testing.T, body []byte) *Error {
	t.Helper()
	var e Error
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("the answer is not JSON: %v\n%s", err, body)
	}
	return &e
}
