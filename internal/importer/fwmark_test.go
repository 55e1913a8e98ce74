package importer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/testutil"
)

// markOf reads rules and lists what mark stands for, "proto vip ports" joined by "; ", or the
// refusal (the rules file named FILE).
func markOf(t *testing.T, rules, mark string) string {
	t.Helper()
	path := write(t, "rules", rules)
	m, err := readMarkRules(path)
	if err != nil {
		return "error: " + err.Error()
	}
	ls, err := m.listeners(mark)
	if err != nil {
		return "refused: " + strings.ReplaceAll(err.Error(), path, "FILE")
	}
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s %s %s", l.proto, l.vip, l.ports))
	}
	return strings.Join(out, "; ")
}

// TestFwmarkRules reads iptables-save and nft list ruleset rules: what a mark stands for, or
// why its rules are refused (at their line).
func TestFwmarkRules(t *testing.T) {
	for _, tc := range []struct {
		name, rules, mark, want string
	}{
		{"iptables multiport", "*mangle\n-A PREROUTING -d 10.0.0.1/32 -p tcp -m multiport --dports 80,443 -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n", "1",
			"tcp 10.0.0.1 80,443"},
		{"iptables rules joined and merged", "-A PREROUTING -d 10.0.0.1/32 -p tcp -m tcp --dport 8000:8010 -j MARK --set-mark 7\n-A PREROUTING -d 10.0.0.1 -p tcp -m tcp --dport 8011 -j MARK --set-mark 0x7\n-A PREROUTING -d 10.0.0.1 -p 6 -m tcp --dport 80 -j MARK --set-mark 7\n", "7",
			"tcp 10.0.0.1 80,8000-8011"},
		{"iptables no port: every port of both protocols", "-A PREROUTING -d 10.0.0.1/32 -j MARK --set-mark 2\n", "2",
			"tcp 10.0.0.1 1-65535; udp 10.0.0.1 1-65535"},
		{"iptables 0:1023", "-A PREROUTING -d 10.0.0.1/32 -p udp -m udp --dport 0:1023 -j MARK --set-mark 2\n", "2", "udp 10.0.0.1 1-1023"},
		{"iptables ipv6", "-A PREROUTING -d 2001:db8::1/128 -p tcp -m tcp --dport 443 -j MARK --set-mark 3\n", "3", "tcp 2001:db8::1 443"},
		{"iptables other marks and targets", "-A PREROUTING -d 10.0.0.9/32 -i eth1 -j MARK --set-mark 9\n-A PREROUTING -j CONNMARK --restore-mark\n-A INPUT -p tcp --dport 22 -j ACCEPT\n-A PREROUTING -d 10.0.0.1/32 -p tcp --dport 80 -j MARK --set-mark 1\n", "1",
			"tcp 10.0.0.1 80"},
		{"iptables prefix", "-A PREROUTING -d 10.0.0.0/24 -p tcp --dport 80 -j MARK --set-mark 1\n", "1",
			`refused: FILE:1: destination "10.0.0.0/24" is not one address (a VIP)`},
		{"iptables source", "-A PREROUTING -s 10.9.0.0/16 -d 10.0.0.1/32 -p tcp --dport 80 -j MARK --set-mark 1\n", "1",
			"refused: FILE:1: -s (source addresses or ports)"},
		{"iptables interface", "-A PREROUTING -i eth0 -d 10.0.0.1/32 -p tcp --dport 80 -j MARK --set-mark 1\n", "1",
			`refused: FILE:1: -i "eth0" (an interface)`},
		{"iptables or-mark", "-A PREROUTING -d 10.0.0.1/32 -p tcp --dport 80 -j MARK --or-mark 0x1\n", "1",
			"refused: FILE:1: it sets mark 1 with a mask or an operator, keeping bits of the packet's mark: set the whole mark (--set-mark 1, meta mark set 1)"},
		{"iptables sctp", "-A PREROUTING -d 10.0.0.1/32 -p sctp -j MARK --set-mark 1\n", "1",
			`refused: FILE:1: protocol "sctp": Sluice balances tcp and udp`},
		{"iptables state", "-A PREROUTING -d 10.0.0.1/32 -p tcp -m state --state NEW -j MARK --set-mark 1\n", "1",
			`refused: FILE:1: -m "state" is not understood`},
		{"iptables port name", "-A PREROUTING -d 10.0.0.1/32 -p tcp --dport http -j MARK --set-mark 1\n", "1",
			`refused: FILE:1: destination port "http" is not a port or a range`},
		{"iptables unterminated quote", "-A PREROUTING -d 10.0.0.1/32 -m comment --comment \"x -j MARK --set-mark 1\n", "1",
			"refused: FILE:1: which mark this rule sets is not clear (an unterminated quote): it may be mark 1"},
		{"iptables mark not a number", "-A PREROUTING -d 10.0.0.1/32 -j MARK --set-mark one\n", "1",
			"refused: FILE:1: which mark this rule sets is not clear"},
		{"nft set of VIPs and ports", "\t\tip daddr { 10.0.0.1, 10.0.0.2 } tcp dport { 80, 443, 8000-8010 } meta mark set 0x00000010\n", "16",
			"tcp 10.0.0.1 80,443,8000-8010; tcp 10.0.0.2 80,443,8000-8010"},
		{"nft l4proto set and th dport", "ip daddr 10.0.0.1 meta l4proto { tcp, udp } th dport 53 counter packets 5 bytes 300 meta mark set 5 comment \"dns\" accept # handle 7\n", "5",
			"tcp 10.0.0.1 53; udp 10.0.0.1 53"},
		{"nft ct mark is not the packet's", "ip daddr 10.0.0.1 tcp dport 80 ct mark set 0x1\nip daddr 10.0.0.2 tcp dport 80 mark set 1\n", "1",
			"tcp 10.0.0.2 80"},
		{"nft negation", "ip daddr != 10.0.0.1 tcp dport 80 meta mark set 1\n", "1", "refused: FILE:1: a negation (!=)"},
		{"nft source", "ip saddr 10.9.0.0/16 ip daddr 10.0.0.1 tcp dport 80 meta mark set 1\n", "1", `refused: FILE:1: "ip saddr" (source addresses or ports)`},
		{"nft mark with bits kept", "ip daddr 10.0.0.1 tcp dport 80 meta mark set 0x1 | 0x2\n", "1", "refused: FILE:1: it sets mark 1 with a mask"},
		{"nft contradicting protocols", "ip daddr 10.0.0.1 meta l4proto udp tcp dport 80 meta mark set 1\n", "1", "refused: FILE:1: its protocol matches contradict each other"},
		{"nft unclosed set", "ip daddr { 10.0.0.1, tcp dport 80 meta mark set 1\n", "1", "refused: FILE:1: a set { without its }"},
		{"nft concatenation", "ip daddr . tcp dport { 10.0.0.1 . 80 } meta mark set 1\n", "1", `refused: FILE:1: destination "." is not one address (a VIP)`},
		{"nft mark from a map", "meta mark set tcp dport map { 80 : 0x1 }\n", "1", "refused: FILE:1: which mark this rule sets is not clear"},
		{"no rule", "-A PREROUTING -d 10.0.0.1/32 -p tcp --dport 80 -j MARK --set-mark 2\n", "1", "refused: no rule of FILE sets mark 1"},
		{"mark 0", "", "0", `refused: "0" is not a firewall mark from 1 to 4294967295`},
		{"other marks' problems do not matter", "-A PREROUTING -i eth0 -j MARK --set-mark 2\n-A PREROUTING -d 10.0.0.1/32 -p tcp --dport 80 -j MARK --set-mark 1\n", "1", "tcp 10.0.0.1 80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := markOf(t, tc.rules, tc.mark)
			if strings.HasPrefix(tc.want, "refused: ") && !strings.HasPrefix(got, tc.want) || !strings.HasPrefix(tc.want, "refused: ") && got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestFwmarkRulesLimits: a rules file is read within its limits, each refused at its line.
func TestFwmarkRulesLimits(t *testing.T) {
	vips := make([]string, 256)
	for i := range vips {
		vips[i] = fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
	}
	ports := make([]string, 200)
	for i := range ports {
		ports[i] = fmt.Sprint(i + 1)
	}
	expansion := "ip daddr { " + strings.Join(vips, ", ") + " } th dport { " + strings.Join(ports, ", ") + " } meta mark set 1\n"
	for _, tc := range []struct{ name, rules, want string }{
		{"lines", strings.Repeat("\n", MaxFwmarkLines+1), fmt.Sprintf("rules:%d: more than %d lines", MaxFwmarkLines+1, MaxFwmarkLines)},
		{"line length", strings.Repeat("x", MaxLineBytes+1), "rules:1: a line longer than 64 KiB"},
		{"NUL", "-A PREROUTING\x00\n", "rules:1: a NUL byte"},
		{"expansion", expansion, fmt.Sprintf("rules:1: the rules that set marks name more than %d addresses, protocols and ports", MaxFwmarkEntries)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, "rules", tc.rules)
			var err error
			if n := testutil.Allocated(func() { _, err = readMarkRules(path) }); n > 64<<20 {
				t.Errorf("allocated %d bytes", n)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := readMarkRules("/dev/zero"); err == nil {
		t.Error("read /dev/zero")
	}
}

// TestFwmarkRulesOptions: --fwmark-rules that cannot be read refuses the import; nftlb refuses
// the flag, as its farms name their ports.
func TestFwmarkRulesOptions(t *testing.T) {
	src := write(t, "k.conf", "virtual_server fwmark 1 {\n    lb_kind DR\n    real_server 10.0.1.1 0\n}\n")
	if _, err := Keepalived(src, Options{FwmarkRules: filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.HasPrefix(err.Error(), "--fwmark-rules: ") {
		t.Errorf("missing rules file: %v", err)
	}
	if _, err := Ipvsadm(write(t, "s", "-A -f 1 -s rr\n"), Options{FwmarkRules: "/dev/zero"}); err == nil || !strings.HasPrefix(err.Error(), "--fwmark-rules: ") {
		t.Errorf("/dev/zero: %v", err)
	}
	nftlb := write(t, "n.json", `{"farms":[{"name":"web","virtual-addr":"10.0.0.1","virtual-ports":"80","backends":[{"name":"a","ip-addr":"10.0.1.1"}]}]}`)
	if _, err := Nftlb(nftlb, Options{FwmarkRules: src}); err == nil || !strings.Contains(err.Error(), "--fwmark-rules is for keepalived and ipvsadm") {
		t.Errorf("nftlb with --fwmark-rules: %v", err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Fatal(err)
	}
}
