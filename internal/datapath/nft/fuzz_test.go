package nft

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

// FuzzRender builds configs of one to three services from fuzzed choices (modes, the schedulers
// nft takes, ports and ranges, IPv4 and IPv6, backends, weights, fallbacks, persistence, sh_port),
// keeps those config.Parse accepts, and checks that the transaction Apply would send for them
// from an empty kernel parses and passes the kernel's checks: `nft -c -f -`, which changes
// nothing, inside a network namespace of its own holding the devices testEnv names.
func FuzzRender(f *testing.F) {
	if os.Geteuid() != 0 {
		testutil.Missing(f, "needs root: runs nft -c in a network namespace")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Missing(f, "needs nft: %v", err)
	}
	ns := netnstest.New(f)
	netnstest.In(f, ns, func() {
		for _, name := range []string{"eth0", "eth1"} {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "-peer"}); err != nil {
				f.Fatal(err)
			}
		}
	})
	for i := range 64 { // spread choices: every byte a different step through the options
		seed := make([]byte, 96)
		for j := range seed {
			seed[j] = byte(i*(j+1) + j/3)
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, choices []byte) {
		yaml := fuzzConfig(choices)
		cfg, err := config.Parse("fuzz.yaml", []byte(yaml))
		if err != nil {
			t.Skip(err)
		}
		p, err := plan.Build(cfg, nil)
		if err != nil {
			t.Fatalf("plan of an accepted config: %v\n%s", err, yaml)
		}
		st, err := render(p, testEnv)
		if err != nil {
			// the renderer may refuse what this datapath cannot do (dsr over IPv6), naming the service
			if !strings.Contains(err.Error(), "service s") {
				t.Fatalf("rendering an accepted config: %v, naming no service\n%s", err, yaml)
			}
			t.Skip(err)
		}
		script, err := firstApply(st)
		if err != nil {
			t.Fatalf("the transaction: %v\n%s", err, yaml)
		}
		netnstest.In(t, ns, func() {
			cmd := exec.Command("nft", "-c", "-f", "-")
			cmd.Stdin = strings.NewReader(script)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("nft -c refuses the transaction of\n%s\n%v: %s\n%s", yaml, err, out, script)
			}
		})
	})
}

// firstApply is the script Apply sends for st to a kernel without Sluice's tables: the conntrack
// timeout policies (ensureCTTimeouts), then the transaction, its element commands coalesced.
func firstApply(st *state) (string, error) {
	tx := knftables.NewFake("", "").NewTransaction()
	reconcile(tx, newState(), st)
	script, err := coalesce(tx.String())
	if err != nil {
		return "", err
	}
	policies := fmt.Sprintf("add table %s %s\n%s\n%s\n", knftables.InetFamily, TableName, ctTimeouts["tcp"].definition(), ctTimeouts["udp"].definition())
	return policies + script, nil
}

// choices draws a fuzzed input's choices one byte each, 0 once it runs out.
type choices []byte

// pick is the next choice among n.
func (c *choices) pick(n int) int {
	if len(*c) == 0 {
		return 0
	}
	v := int((*c)[0]) % n
	*c = (*c)[1:]
	return v
}

// of is the next choice among options.
func of[T any](c *choices, options ...T) T { return options[c.pick(len(options))] }

// fuzzConfig is the YAML of the config the choices make: one to three services on two VIPs of
// either family, which may collide (the config then refuses them).
func fuzzConfig(b []byte) string {
	c := choices(b)
	var y bytes.Buffer
	y.WriteString("services:\n")
	for i := range 1 + c.pick(3) {
		v6 := c.pick(2) == 1
		vip, backend := fmt.Sprintf("10.91.9.%d", 100+c.pick(2)), "10.91.2.%d"
		if v6 {
			vip, backend = fmt.Sprintf("fd00:91:9::%d", 100+c.pick(2)), "fd00:91:2::%d"
		}
		first := of(&c, 80, 53, 443, 1, 65535, 8080)
		port := fmt.Sprint(first)
		if c.pick(2) == 1 {
			port = fmt.Sprintf("\"%d-%d\"", first, min(65535, first+c.pick(40)))
		}
		sched, mode := of(&c, "maglev", "hash", "rr", "wrr", "random", "sh"), of(&c, "nat", "fullnat", "dsr")
		fmt.Fprintf(&y, "  - name: s%d\n    vip: %s\n    port: %s\n    protocol: %s\n    mode: %s\n    scheduler: %s\n",
			i, vip, port, of(&c, "tcp", "udp"), mode, sched)
		if sched == "maglev" || sched == "sh" {
			y.WriteString(of(&c, "", "    table_size: 7\n", "    table_size: 251\n"))
		}
		if sched == "sh" {
			y.WriteString(of(&c, "", "    sh_port: true\n"))
		}
		if mode == "dsr" {
			y.WriteString(of(&c, "", "    flow_timeout: 30s\n"))
		}
		y.WriteString(of(&c, "", "    fallback: drop\n", "    fallback: reject\n"))
		if timeout := of(&c, "", "120s", "1h"); timeout != "" {
			fmt.Fprintf(&y, "    persistence_timeout: %s\n", timeout)
			if bits := of(&c, 0, 24, 32, 64, 128); bits > 0 && (v6 || bits <= 32) {
				fmt.Fprintf(&y, "    persistence_granularity: %d\n", bits)
			}
		}
		y.WriteString("    backends:\n")
		for j := range of(&c, 2, 1, 3, 0) {
			fmt.Fprintf(&y, "      - address: "+backend+"\n", 11+j)
			y.WriteString(of(&c, "", "        port: 8080\n", "        port: 53\n"))
			y.WriteString(of(&c, "", "        weight: 0\n", "        weight: 2\n", "        weight: 100\n"))
		}
		if y.Bytes()[y.Len()-2] == ':' { // no backend
			y.WriteString("      []\n")
		}
	}
	return y.String()
}
