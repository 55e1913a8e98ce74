package cli

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/plan"
)

func TestParseBackendSpec(t *testing.T) {
	for spec, want := range map[string]string{
		"10.0.0.1":         "10.0.0.1 port 0 weight 1",
		"10.0.0.1:8080":    "10.0.0.1 port 8080 weight 1",
		"10.0.0.1:8080@3":  "10.0.0.1 port 8080 weight 3",
		"[fd00::1]:80@0":   "fd00::1 port 80 weight 0",
		"fd00::1":          "fd00::1 port 0 weight 1",
		"10.0.0.1@x":       `weight "x" is not a number`,
		"10.0.0":           `"10.0.0" is not an address or address:port`,
		"10.0.0.1:99999@1": `"10.0.0.1:99999" is not an address or address:port`,
	} {
		b, err := parseBackendSpec(spec)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = b.Address + " port " + strconv.Itoa(b.Port) + " weight " + strconv.Itoa(b.WeightOrDefault())
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", spec, got, want)
		}
	}
}

func TestSplitListener(t *testing.T) {
	vip, ports, err := splitListener("[fd00::9]:8000-8010")
	if err != nil || vip != "fd00::9" || ports.First != 8000 || ports.Last != 8010 {
		t.Fatalf("got %s %v %v", vip, ports, err)
	}
	if _, _, err := splitListener("10.0.0.1"); err == nil {
		t.Fatal("a listener without a port was accepted")
	}
}

func TestPrintChange(t *testing.T) {
	var b strings.Builder
	_ = printChange(&b, plan.Change{Changed: []string{"web"}, Moved: map[string]float64{"web": 0.25}}, true)
	if got := b.String(); got != "would have changed service web: 25.0% of new flows' slots move to another backend\n" {
		t.Fatalf("got %q", got)
	}
	b.Reset()
	_ = printChange(&b, plan.Change{}, true)
	if b.String() != "nothing to change\n" {
		t.Fatalf("got %q", b.String())
	}
}
