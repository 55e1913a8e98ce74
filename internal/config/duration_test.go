package config

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// durationsConfig writes every duration of the config the way an operator might: none of them
// as time.Duration.String would.
const durationsConfig = `bgp:
  asn: 65100
  shutdown_grace: 1m
  peers:
    - address: 10.9.0.1
      asn: 65000
      hold_time: 9s
      bfd: true
      bfd_interval: 0.25s
sync:
  interface: eth1
  peers: [10.91.4.12]
  secret_file: /etc/sluice/sync.key
  initial_sync_timeout: 0
  refresh_interval: 2m
services:
  - name: web
    vip: 10.91.9.1
    port: 80
    backends:
      - address: 10.91.2.11
    persistence_timeout: 300s
    health_check:
      type: tcp
      interval: 2000ms
      timeout: 1.5s
  - name: dsr
    vip: 10.91.9.2
    port: 80
    mode: dsr
    flow_timeout: 1m
    backends:
      - address: 10.91.2.12
`

// TestDurationsEncodeAsWritten: a duration is written back as the text it was read from, in YAML
// and JSON ("1m" stays "1m", not "1m0s"), and means what it says.
func TestDurationsEncodeAsWritten(t *testing.T) {
	cfg := mustParse(t, durationsConfig)
	if cfg.BGP.ShutdownGraceOrDefault() != time.Minute || cfg.Sync.InitialSyncTimeoutOrDefault() != 0 ||
		cfg.Services[0].HealthCheck.TimeoutOrDefault() != 1500*time.Millisecond || cfg.Services[0].PersistenceOrZero() != 5*time.Minute ||
		cfg.Services[1].FlowTimeout.Duration != time.Minute || cfg.BGP.Peers[0].BFDIntervalOrDefault() != 250*time.Millisecond {
		t.Errorf("parsed: %+v %+v %+v", cfg.BGP, cfg.Sync, cfg.Services[0].HealthCheck)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shutdown_grace: 1m\n", "hold_time: 9s\n", "bfd_interval: 0.25s\n",
		`initial_sync_timeout: "0"` + "\n", "refresh_interval: 2m\n", "interval: 2000ms\n", "timeout: 1.5s\n",
		"persistence_timeout: 300s\n", "flow_timeout: 1m\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("YAML lacks %q:\n%s", want, out)
		}
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"shutdown_grace":"1m"`, `"initial_sync_timeout":"0"`, `"interval":"2000ms"`, `"timeout":"1.5s"`, `"flow_timeout":"1m"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
	var back Config
	if err := json.Unmarshal(js, &back); err != nil || len(back.Validate()) > 0 || !reflect.DeepEqual(&back, cfg) {
		t.Errorf("JSON round trip: %v\n%+v\n%+v", err, back, *cfg)
	}
	again, err := Parse("again", out)
	if err != nil || !reflect.DeepEqual(again, cfg) {
		t.Errorf("YAML round trip: %v\n%+v\n%+v", err, again, *cfg)
	}
}

// TestUnsetDurationsNotWritten: a duration left out is not written, in YAML or JSON.
func TestUnsetDurationsNotWritten(t *testing.T) {
	cfg := mustParse(t, `services:
  - name: web
    vip: 10.91.9.1
    port: 80
    backends:
      - address: 10.91.2.11
    health_check:
      type: tcp
`)
	out, _ := yaml.Marshal(cfg)
	js, _ := json.Marshal(cfg)
	for _, key := range []string{"interval", "timeout"} {
		if strings.Contains(string(out), key) || strings.Contains(string(js), key) {
			t.Errorf("unset %s written:\n%s\n%s", key, out, js)
		}
	}
}

// TestBadDurationsByLine: every duration that does not parse is reported at its line, with the
// text as written.
func TestBadDurationsByLine(t *testing.T) {
	_, err := Parse("f.yaml", []byte(`bgp:
  asn: 65100
  shutdown_grace: soon
  peers:
    - {address: 10.9.0.1, asn: 65000, hold_time: 9, bfd: true, bfd_interval: 1.5ms}
sync:
  interface: eth1
  peers: [10.91.4.12]
  secret_file: /etc/sluice/sync.key
  initial_sync_timeout: -1s
services:
  - name: web
    vip: 10.91.9.1
    port: 80
    backends:
      - address: 10.91.2.11
    health_check:
      type: tcp
      interval: [2s]
      timeout: 2 s
  - name: dsr
    vip: 10.91.9.2
    port: 80
    mode: dsr
    flow_timeout: 0.5s
    persistence_timeout: 1m30.5s
    backends:
      - address: 10.91.2.12
`))
	for _, want := range []string{
		`f.yaml:3: bgp.shutdown_grace: "soon" is not a duration between 0s and 10m0s`,
		`f.yaml:5: bgp.peers[0].hold_time: "9" is not whole seconds`,
		`f.yaml:5: bgp.peers[0].bfd_interval: "1.5ms" is not whole milliseconds`,
		`f.yaml:10: sync.initial_sync_timeout: "-1s" is not a duration between 0s and 10m0s`,
		`f.yaml:19: services[0].health_check.interval: expected a duration like 2s, found a list`,
		`f.yaml:20: services[0].health_check.timeout: "2 s" is not a duration between 10ms and 1h`,
		`f.yaml:25: services[1].flow_timeout: "0.5s" is not a duration of at least 1s`,
		`f.yaml:26: services[1].persistence_timeout: "1m30.5s" is not a whole number of seconds`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %s in\n%v", want, err)
		}
	}
}

// TestDurationOfWrongJSONType: a duration that is not a JSON string fails as a string field does,
// a type error the API names the field of (encoding/json fills the field in before Go 1.27 only);
// null leaves it unset.
func TestDurationOfWrongJSONType(t *testing.T) {
	var h HealthCheck
	err := json.Unmarshal([]byte(`{"interval": 5}`), &h)
	var wrong *json.UnmarshalTypeError
	if !errors.As(err, &wrong) || wrong.Type.Kind() != reflect.String || wrong.Value != "number" {
		t.Fatalf("got %#v", err)
	}
	if err := json.Unmarshal([]byte(`{"interval": null}`), &h); err != nil || !h.Interval.IsZero() {
		t.Fatalf("null: %v, %v", err, h.Interval)
	}
}

// TestDurationFrom: a Duration made in Go is written as time.Duration writes it.
func TestDurationFrom(t *testing.T) {
	d := DurationFrom(90 * time.Second)
	if d.String() != "1m30s" || !d.IsValid() || d.Or(time.Second) != 90*time.Second || d.IsZero() {
		t.Errorf("%#v", d)
	}
	if bad := DurationOf("1x"); bad.IsValid() || bad.Or(time.Second) != time.Second || bad.String() != "1x" {
		t.Errorf("%#v", bad)
	}
}
