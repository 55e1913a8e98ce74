package labcli

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchFailoverRefusesBadFlags checks that bench failover refuses each option out of range
// with an error naming the benchmark and the flag, before it needs root or builds a lab.
func TestBenchFailoverRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--datapath", "ipvs"}, "bench failover: --datapath:"},
		{[]string{"--datapath", "nft,nft"}, "bench failover: --datapath:"},
		{[]string{"--modes", "masq"}, "bench failover: --modes:"},
		{[]string{"--modes", ""}, "bench failover: --modes:"},
		{[]string{"--events", "meteor"}, "bench failover: --events:"},
		{[]string{"--events", "drain,drain"}, "bench failover: --events:"},
		{[]string{"--conns", "0"}, "bench failover: --conns:"},
		{[]string{"--conns", "1001"}, "bench failover: --conns:"},
		{[]string{"--new-rate", "0"}, "bench failover: --new-rate:"},
		{[]string{"--new-rate", "201"}, "bench failover: --new-rate:"},
		{[]string{"-o", "xml"}, "bench failover: -o:"},
	} {
		root := Command()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"bench", "--prefix", "h28-unused", "failover"}, tc.args...))
		err := root.Execute()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("sluice-lab bench failover %v: err %v, want one starting %q", tc.args, err, tc.want)
		}
		if strings.Contains(out.String(), "bringing up") {
			t.Errorf("sluice-lab bench failover %v started a lab:\n%s", tc.args, out.String())
		}
	}
}
