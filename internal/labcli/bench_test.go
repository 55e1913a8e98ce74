package labcli

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchRefusesBadFlags checks that every bench subcommand refuses an option out of range
// with an error naming the benchmark and the flag, before it needs root or builds a lab.
func TestBenchRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lb", "--rounds", "0"}, "bench lb: --rounds:"},
		{[]string{"lb", "--duration", "0s"}, "bench lb: --duration:"},
		{[]string{"net", "--rounds", "0"}, "bench net: --rounds:"},
		{[]string{"scale", "--datapath", "ipvs"}, "bench scale: --datapath:"},
		{[]string{"scale", "--services", "0"}, "bench scale: --services:"},
		{[]string{"fleet", "--nodes", "1"}, "bench fleet: --nodes:"},
		{[]string{"fleet", "-o", "xml"}, "bench fleet: -o:"},
		{[]string{"failover", "--datapath", "ipvs"}, "bench failover: --datapath:"},
		{[]string{"failover", "--datapath", "nft,nft"}, "bench failover: --datapath:"},
		{[]string{"failover", "--modes", "masq"}, "bench failover: --modes:"},
		{[]string{"failover", "--modes", "tunnel"}, "bench failover: --modes:"},
		{[]string{"failover", "--modes", ""}, "bench failover: --modes:"},
		{[]string{"failover", "--events", "meteor"}, "bench failover: --events:"},
		{[]string{"failover", "--events", "drain,drain"}, "bench failover: --events:"},
		{[]string{"failover", "--conns", "0"}, "bench failover: --conns:"},
		{[]string{"failover", "--conns", "1001"}, "bench failover: --conns:"},
		{[]string{"failover", "--new-rate", "0"}, "bench failover: --new-rate:"},
		{[]string{"failover", "--new-rate", "201"}, "bench failover: --new-rate:"},
		{[]string{"failover", "-o", "xml"}, "bench failover: -o:"},
	} {
		root := Command()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"bench", "--prefix", "h14-unused"}, tc.args...))
		err := root.Execute()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("sluice-lab bench %v: err %v, want one starting %q", tc.args, err, tc.want)
		}
		if strings.Contains(out.String(), "bringing up") {
			t.Errorf("sluice-lab bench %v started a lab:\n%s", tc.args, out.String())
		}
	}
}
