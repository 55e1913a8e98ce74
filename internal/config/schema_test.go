package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const schemaFile = "../../docs/sluice.schema.json"

// TestSchemaFileIsGenerated: the committed schema is the one the model generates.
func TestSchemaFileIsGenerated(t *testing.T) {
	committed, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, JSONSchemaText()) {
		t.Fatalf("%s is not what the model generates: go run ./cmd/sluice schema > docs/sluice.schema.json", schemaFile)
	}
}

// TestSchemaTakesGoodConfigs: every example and good test config validates against the schema.
func TestSchemaTakesGoodConfigs(t *testing.T) {
	schema := loadSchema(t)
	good, _ := filepath.Glob("testdata/good/*.yaml")
	examples, _ := filepath.Glob("../../examples/*.yaml")
	if len(good) == 0 || len(examples) == 0 {
		t.Fatal("no configs")
	}
	for _, f := range append(good, examples...) {
		if err := schema.validate(yamlValue(t, f), ""); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestSchemaRefusesBadConfigs: the schema refuses what it can tell is wrong on its own.
func TestSchemaRefusesBadConfigs(t *testing.T) {
	schema := loadSchema(t)
	for file, want := range map[string]string{
		"unknown-key.yaml":      "services[0].backends[0].weigth: unknown",
		"unknown-top-key.yaml":  "colour: unknown",
		"bgp-unknown-key.yaml":  "bgp.peers[0].holdtime: unknown",
		"mode.yaml":             `services[0].mode: "gre" is not one of`,
		"datapath.yaml":         `datapath: "bpf" is not one of`,
		"weight.yaml":           "services[0].backends[0].weight: 1001 is above 1000",
		"weight-fraction.yaml":  "services[0].backends[0].weight: 1.5 is not a JSON integer",
		"port.yaml":             "services[0].port: matches none",
		"port-text.yaml":        "services[0].port: matches none",
		"ebpf-slots.yaml":       "ebpf.maglev_slots: matches none",
		"interface-name.yaml":   "interfaces[1]: ",
		"bgp-community.yaml":    "bgp.peers[0].communities[1]: ",
		"bgp-no-peers.yaml":     "bgp.peers: 0 items, fewer than 1",
		"bgp-listen-port.yaml":  "bgp.listen_port: matches none",
		"no-services.yaml":      "services: missing",
		"type-error.yaml":       "services[0].port: matches none",
		"check-type.yaml":       `services[0].health_check.type: "ldap" is not one of`,
		"check-digest.yaml":     `services[0].backends[0].health_check.expect_digest: "not-md5" does not match`,
		"check-query-type.yaml": `services[0].health_check.query_type: "ANY" is not one of`,
	} {
		err := schema.validate(yamlValue(t, "testdata/bad/"+file), "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", file, err, want)
		}
	}
}

// jsonSchema is a schema as JSON decodes it, checked by a validator of the keywords JSONSchema
// emits: a keyword it does not know fails the test instead of being ignored.
type jsonSchema map[string]any

var knownKeywords = []string{"$schema", "title", "$ref", "$defs", "type", "enum", "default", "const",
	"minimum", "maximum", "pattern", "maxLength", "minItems", "maxItems", "items", "properties",
	"required", "additionalProperties", "anyOf"}

func loadSchema(t *testing.T) *schemaValidator {
	var root jsonSchema
	if err := json.Unmarshal(JSONSchemaText(), &root); err != nil {
		t.Fatal(err)
	}
	return &schemaValidator{root: root, node: root}
}

type schemaValidator struct{ root, node jsonSchema }

func (v *schemaValidator) at(node any) *schemaValidator {
	return &schemaValidator{root: v.root, node: node.(map[string]any)}
}

// validate checks value, found at path, against the node.
func (v *schemaValidator) validate(value any, path string) error {
	s := v.node
	for k := range s {
		if !slices.Contains(knownKeywords, k) {
			return fmt.Errorf("%s: the test's validator does not know the keyword %q", path, k)
		}
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
	}
	if ref, ok := s["$ref"].(string); ok {
		def := v.root["$defs"].(map[string]any)[strings.TrimPrefix(ref, "#/$defs/")]
		if def == nil {
			return fail("no definition %s", ref)
		}
		return v.at(def).validate(value, path)
	}
	if typ, ok := s["type"].(string); ok && !hasType(value, typ) {
		return fail("%v is not a JSON %s", value, typ)
	}
	if c, ok := s["const"]; ok && c != value {
		return fail("%v is not %v", value, c)
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, value) {
		return fail("%q is not one of %v", value, enum)
	}
	if n, ok := value.(float64); ok {
		if m, ok := s["minimum"].(float64); ok && n < m {
			return fail("%v is below %v", n, m)
		}
		if m, ok := s["maximum"].(float64); ok && n > m {
			return fail("%v is above %v", n, m)
		}
	}
	if text, ok := value.(string); ok {
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(text) {
			return fail("%q does not match %s", text, p)
		}
		if m, ok := s["maxLength"].(float64); ok && float64(len([]rune(text))) > m {
			return fail("longer than %v", m)
		}
	}
	if items, ok := value.([]any); ok {
		if m, ok := s["minItems"].(float64); ok && float64(len(items)) < m {
			return fail("%d items, fewer than %v", len(items), m)
		}
		if m, ok := s["maxItems"].(float64); ok && float64(len(items)) > m {
			return fail("%d items, more than %v", len(items), m)
		}
		if item, ok := s["items"]; ok {
			for i, x := range items {
				if err := v.at(item).validate(x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	if obj, ok := value.(map[string]any); ok {
		if err := v.object(obj, path); err != nil {
			return err
		}
	}
	if anyOf, ok := s["anyOf"].([]any); ok {
		var errs []string
		for _, alt := range anyOf {
			err := v.at(alt).validate(value, path)
			if err == nil {
				return nil
			}
			errs = append(errs, err.Error())
		}
		return fail("matches none of: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (v *schemaValidator) object(obj map[string]any, path string) error {
	s := v.node
	props, _ := s["properties"].(map[string]any)
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	for _, k := range asStrings(s["required"]) {
		if _, ok := obj[k]; !ok {
			return fmt.Errorf("%s: missing", join(k))
		}
	}
	for k, x := range obj {
		p, known := props[k]
		if !known {
			if s["additionalProperties"] == false {
				return fmt.Errorf("%s: unknown", join(k))
			}
			continue
		}
		if err := v.at(p).validate(x, join(k)); err != nil {
			return err
		}
	}
	return nil
}

func asStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		out = append(out, x.(string))
	}
	return out
}

func hasType(v any, typ string) bool {
	switch v := v.(type) {
	case map[string]any:
		return typ == "object"
	case []any:
		return typ == "array"
	case string:
		return typ == "string"
	case bool:
		return typ == "boolean"
	case float64:
		return typ == "number" || typ == "integer" && v == math.Trunc(v)
	}
	return typ == "null"
}

// yamlValue reads a YAML file as the JSON value an editor's validator sees.
func yamlValue(t *testing.T, path string) any {
	var v any
	if err := yaml.Unmarshal(mustRead(t, path), &v); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
