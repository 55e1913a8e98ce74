package cli

import (
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseBackendSpec(t *testing.T) {
	for spec, want := range map[string]string{
		"10.0.0.1":               "10.0.0.1 port 0 weight 1",
		"10.0.0.1:8080":          "10.0.0.1 port 8080 weight 1",
		"10.0.0.1:8080@3":        "10.0.0.1 port 8080 weight 3",
		"[fd00::1]:80@0":         "fd00::1 port 80 weight 0",
		"fd00::1":                "fd00::1 port 0 weight 1",
		"::ffff:10.0.0.1":        "10.0.0.1 port 0 weight 1",
		"[::ffff:10.0.0.1]:80@2": "10.0.0.1 port 80 weight 2",
		"10.0.0.1@x":             `weight "x" is not a number`,
		"10.0.0":                 `"10.0.0" is not an address or address:port`,
		"10.0.0.1:99999@1":       `"10.0.0.1:99999" is not an address or address:port`,
	} {
		b, err := parseBackendSpec(spec)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = b.Address.String() + " port " + strconv.Itoa(b.Port) + " weight " + strconv.Itoa(b.WeightOrDefault())
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", spec, got, want)
		}
	}
}

func TestSplitListener(t *testing.T) {
	vip, ports, err := splitListener("[fd00::9]:8000-8010")
	if err != nil || vip.String() != "fd00::9" || ports.String() != "8000-8010" {
		t.Fatalf("got %s %v %v", vip, ports, err)
	}
	if _, ports, err := splitListener("10.0.0.9:80,443,8000-8010"); err != nil || ports.String() != "80,443,8000-8010" {
		t.Fatalf("a list of ports gave %v %v", ports, err)
	}
	if vip, _, err := splitListener("[::ffff:10.0.0.9]:80"); err != nil || vip.String() != "10.0.0.9" {
		t.Fatalf("an IPv4-mapped VIP gave %s %v", vip, err)
	}
	if _, _, err := splitListener("10.0.0.1"); err == nil {
		t.Fatal("a listener without a port was accepted")
	}
}

// TestBadFlagsAreRefused runs command lines with flag values that were once ignored or bent into
// something else: each must fail, naming the flag, before it touches the kernel or a daemon.
func TestBadFlagsAreRefused(t *testing.T) {
	t.Setenv("SLUICE_SOCKET", "")
	missing := filepath.Join(t.TempDir(), "nobody.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backend", "drain", "web", "10.0.0.1", "--timeout", "-1s"}, "--timeout: -1s is not a duration above 0"},
		{[]string{"backend", "drain", "web", "10.0.0.1", "--timeout", "0s"}, "--timeout: 0s is not a duration above 0"},
		{[]string{"--log-level", "loud", "list"}, `--log-level: "loud" is not one of debug, info, warn, error`},
		{[]string{"serve", "--log-format", "xml", "-c", missing}, `--log-format: "xml" is not one of text, json`},
		{[]string{"--socket", missing, "list"}, "no sluice daemon answers on --socket " + missing},
		{[]string{"--socket", missing, "backend", "weight", "web", "10.0.0.1", "2"}, "no sluice daemon answers on --socket " + missing},
	} {
		root := rootCmd()
		root.SetArgs(tc.args)
		root.SetOut(io.Discard)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice %s: %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestExplicitSocketFromTheEnvironment(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nobody.sock")
	t.Setenv("SLUICE_SOCKET", missing)
	root := rootCmd()
	root.SetArgs([]string{"list"})
	root.SetOut(io.Discard)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "no sluice daemon answers on --socket "+missing) {
		t.Fatalf("SLUICE_SOCKET naming no daemon: %v", err)
	}
}
