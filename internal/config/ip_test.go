package config

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestAddressesEncodeAsWritten: typed addresses and prefixes encode as the text they were
// written as, canonical: YAML and JSON as the config held them when they were strings.
func TestAddressesEncodeAsWritten(t *testing.T) {
	cfg := mustParse(t, `bgp:
  asn: 65100
  peers:
    - address: "::ffff:10.9.0.1"
      asn: 65000
      next_hop: 10.9.0.11
services:
  - name: web
    vip: FD00::100
    port: 80
    source_allow:
      - fd00:1::7
      - fd00:2::/64
      - fd00:3::9/128
    backends:
      - address: fd00:91:2:0::11
`)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"address: 10.9.0.1\n", "next_hop: 10.9.0.11\n", "vip: fd00::100\n",
		"- fd00:1::7\n", "- fd00:2::/64\n", "- fd00:3::9/128\n", "address: fd00:91:2::11\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("YAML lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "router_id") {
		t.Errorf("an unset router_id is written:\n%s", out)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"address":"10.9.0.1"`, `"vip":"fd00::100"`, `"source_allow":["fd00:1::7","fd00:2::/64","fd00:3::9/128"]`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
	if strings.Contains(string(js), "router_id") || strings.Contains(string(js), `"next_hop":""`) {
		t.Errorf("JSON writes unset addresses: %s", js)
	}
	var back Config
	if err := json.Unmarshal(js, &back); err != nil || len(back.Validate()) > 0 || !reflect.DeepEqual(&back, cfg) {
		t.Errorf("JSON round trip: %v\n%+v\n%+v", err, back, *cfg)
	}
	// Text that did not parse is written back as it was given, for Validate's message to quote.
	if js, err := json.Marshal([]any{IPOf("10.0.0"), PrefixOf("10.0.0/8")}); err != nil || string(js) != `["10.0.0","10.0.0/8"]` {
		t.Errorf("invalid addresses written as %s, %v", js, err)
	}
}

// TestAddressOfWrongJSONType: an address that is not a JSON string fails as a string field
// does, a type error the API names the field of (encoding/json fills the field in before Go 1.27
// only).
func TestAddressOfWrongJSONType(t *testing.T) {
	var s Service
	err := json.Unmarshal([]byte(`{"vip": 5}`), &s)
	var wrong *json.UnmarshalTypeError
	if !errors.As(err, &wrong) || wrong.Type.Kind() != reflect.String || wrong.Value != "number" {
		t.Fatalf("got %#v", err)
	}
	if err := json.Unmarshal([]byte(`{"vip": null, "source_allow": [null]}`), &s); err != nil || !s.VIP.IsZero() {
		t.Fatalf("null: %v, %v", err, s.VIP)
	}
}

// TestBadAddressesByLine: every address that does not parse is reported, each at its line.
func TestBadAddressesByLine(t *testing.T) {
	_, err := Parse("f.yaml", []byte(`bgp:
  asn: 65100
  router_id: 10.9.0
  peers:
    - {address: 10.9.0.1.2, asn: 65000, next_hop: "fe80::1%eth0"}
services:
  - name: web
    vip: 10.91.9
    port: 80
    source_deny: [10.0.0.1/8, nope]
    backends:
      - address: 10.91.2.300
      - address: {a: 1}
`))
	for _, want := range []string{
		`f.yaml:3: bgp.router_id: "10.9.0" is not an IPv4 address`,
		`f.yaml:5: bgp.peers[0].address: "10.9.0.1.2" is not a unicast IP address`,
		`f.yaml:5: bgp.peers[0].next_hop: "fe80::1%eth0" is not an IP address`,
		`f.yaml:8: services[0].vip: "10.91.9" is not an IP address`,
		`f.yaml:10: services[0].source_deny[0]: "10.0.0.1/8" has host bits set: the prefix is 10.0.0.0/8`,
		`f.yaml:10: services[0].source_deny[1]: "nope" is not a prefix like 192.0.2.0/24 or an address`,
		`f.yaml:12: services[0].backends[0].address: "10.91.2.300" is not an IP address`,
		`f.yaml:13: services[0].backends[1].address: expected a text value, found a mapping`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %s in\n%v", want, err)
		}
	}
}
