package importer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// maxFuzzAlloc bounds what one conversion of a fuzz input may allocate: the inputs are small,
// so anything near it is an expansion the limits missed.
const maxFuzzAlloc = 512 << 20

// fuzzImport converts input as the format's file (with a keepalived include beside it), whole
// and with Options.Partial: no panic, a bounded allocation, and any output loads as a Sluice
// config.
func fuzzImport(t *testing.T, convert converter, input []byte) {
	dir := t.TempDir()
	path := filepath.Join(dir, "input")
	for name, data := range map[string][]byte{"input": input, "included.conf": input} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, opts := range []Options{{}, {Partial: true}} {
		convertsSafely(t, len(input), opts, func(opts Options) (*Result, error) { return convert(path, opts) })
	}
}

// convertsSafely runs a conversion of an input of n bytes with opts: it allocates within the fuzz
// bound and, when it converts, prints YAML that validates.
func convertsSafely(t *testing.T, n int, opts Options, convert func(Options) (*Result, error)) {
	t.Helper()
	var res *Result
	var err error
	if a := testutil.Allocated(func() { res, err = convert(opts) }); a > maxFuzzAlloc {
		t.Fatalf("allocated %d bytes for an input of %d (%+v)", a, n, opts)
	}
	if err != nil {
		return
	}
	out, err := res.YAML()
	if err != nil {
		t.Fatalf("converted, but no YAML (%+v): %v", opts, err)
	}
	if _, err := config.Parse("out.yaml", out); err != nil {
		t.Fatalf("the output does not validate (%+v): %v\n%s", opts, err, out)
	}
}

// seeds adds the corpus files of a format (converted, refused and partly converted) and the
// hostile inputs to f.
func seeds(f *testing.F, format string, hostile ...string) {
	for _, dir := range []string{format, "bad", "partial"} {
		entries, _ := os.ReadDir(filepath.Join("testdata", dir))
		for _, e := range entries {
			name := e.Name()
			if dir != format && !strings.HasPrefix(name, format+"-") || strings.HasSuffix(name, ".golden.yaml") || strings.HasSuffix(name, ".err") {
				continue
			}
			if data, err := os.ReadFile(filepath.Join("testdata", dir, name)); err == nil {
				f.Add(data)
			}
		}
	}
	for _, h := range hostile {
		f.Add([]byte(h))
	}
}

func FuzzKeepalived(f *testing.F) {
	seeds(f, "keepalived",
		vs+"include included.conf\n",
		"include /dev/zero\n"+vs,
		vs+strings.Repeat("x {\n", 100),
		strings.Repeat("include included.conf included.conf\n", 4),
		group(4)+strings.Repeat("virtual_server group g {\n    real_server 10.2.0.1 80\n}\n", 4),
		"virtual_server 10.0.0.1 80 {\n"+strings.Repeat("    real_server 10.0.1.1 80\n", 20)+"}\n",
		vs+vs,
		strings.Replace(vs, "10.0.0.1", "0.0.0.0", 1),
		strings.Replace(vs, "10.0.1.1", "127.0.0.1", 1),
		strings.Replace(vs, "10.0.1.1", "10.0.0.1", 1),
		strings.Replace(vs, "10.0.0.1", "fe80::1%eth0", 1),
		strings.Replace(vs, "rr", "r\x00r", 1),
		"root:$y$j9T$Vb2lQ:19000:0:99999:7:::\n",
	)
	f.Fuzz(func(t *testing.T, input []byte) { fuzzImport(t, Keepalived, input) })
}

func FuzzNftlb(f *testing.F) {
	seeds(f, "nftlb",
		`null`, `[]`, `{}`, `{"farms":null}`, `{"farms":[{}]}`,
		`{"farms":[{"name":"web","virtual-addr":"10.0.0.1","virtual-ports":"80,80","backends":[{"name":"a","ip-addr":"10.0.1.1"}]}]}`,
		`{"farms":[{"name":"web","virtual-addr":"fe80::1%eth0","virtual-ports":"80","backends":[{"name":"a","ip-addr":"fe80::2"}]}]}`,
		`{"farms":[{"name":"web","virtual-addr":"0.0.0.0","virtual-ports":"80","backends":[{"name":"a","ip-addr":"127.0.0.1"},{"name":"b","ip-addr":"127.0.0.1"}]}]}`,
		`{"farms":[{"name":"web","virtual-addr":"10.0.0.1","virtual-ports":"1-65535","protocol":"all","backends":[{"name":"a","ip-addr":"10.0.0.1","port":"80"}]}]}`,
		"{\"farms\":[{\"name\":\"w\\u0000\",\"virtual-addr\":\"10.0.0.1\",\"backends\":[{\"ip-addr\":\"10.0.1.1\"}]}]}",
		strings.Repeat("[", 1000)+strings.Repeat("]", 1000),
		`{"farms":[{"name":"a","name":"b","virtual-addr":"10.0.0.1","virtual-addr":"127.0.0.1","backends":[{"ip-addr":"10.0.1.1"}]}]}`,
		`{"farms":[{"name":"a","virtual-addr":"10.0.0.1","virtual-ports":80,"backends":[{"ip-addr":"10.0.1.1","weight":1e3,"port":-1}]}]}`,
		`{"policies":[{"name":"p","type":"blacklist","elements":[{"data":"x"}]}],"farms":[{"name":"a","virtual-addr":"10.0.0.1","policies":[{"name":"p"}]}]}`,
	)
	f.Fuzz(func(t *testing.T, input []byte) { fuzzImport(t, Nftlb, input) })
}

func FuzzIpvsadm(f *testing.F) {
	seeds(f, "ipvsadm",
		"-A -t 10.0.0.1:0 -s rr -p 300\n",
		"-A -t 10.0.0.1:80 -s wlc\n-a -t 10.0.0.1:80 -r 10.0.1.1:80 -m -x 5 -y 10\n",
		"-A -t [fe80::1%eth0]:80 -s rr\n",
		"-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.1:80 -s wlc\n",
		"-A -t 10.0.0.1:80 -t 10.0.0.2:80 -s rr\n",
		"-A -t 10.0.0.1:80 -s rr\n"+strings.Repeat("-a -t 10.0.0.1:80 -r 10.0.1.1:80 -m\n", 20),
		"-A -t 0.0.0.0:80 -s rr\n-a -t 0.0.0.0:80 -r 127.0.0.1:80 -m\n",
		"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.0.0.1:80 -m\n",
		"-A -t 10.0.0.1:80 -s r\x00r\n",
		"# "+strings.Repeat("x", 70_000)+"\n",
		"",
	)
	f.Fuzz(func(t *testing.T, input []byte) { fuzzImport(t, Ipvsadm, input) })
}

// fwmarkConfigs are a keepalived config and an ipvsadm save file whose fwmark services take
// marks 1, 2 and 3 from the fuzzed rules.
var fwmarkConfigs = map[string]string{
	"keepalived": "virtual_server fwmark 1 {\n    lb_kind NAT\n    persistence_timeout 60\n    real_server 10.9.0.1 8080\n}\n" +
		"virtual_server_group g {\n    192.0.2.1 80\n    fwmark 2\n}\nvirtual_server group g {\n    lb_kind DR\n    real_server 10.9.0.2 0\n}\n",
	"ipvsadm": "-A -f 3 -s rr -p 300\n-a -f 3 -r 10.9.0.3:0 -g -w 1\n",
}

// FuzzFwmarkRules reads input as --fwmark-rules (iptables-save or nft list ruleset output):
// no panic, a bounded allocation, and what converts with it loads as a Sluice config.
func FuzzFwmarkRules(f *testing.F) {
	for _, dir := range []string{"keepalived/fwmark", "ipvsadm/fwmark", "bad/fwmark"} {
		entries, _ := os.ReadDir(filepath.Join("testdata", dir))
		for _, e := range entries {
			if data, err := os.ReadFile(filepath.Join("testdata", dir, e.Name())); err == nil {
				f.Add(data)
			}
		}
	}
	for _, h := range []string{
		"-A PREROUTING -d 192.0.2.9/32 -p tcp -m multiport --dports 80,443 -j MARK --set-xmark 0x1/0xffffffff\n",
		"-A PREROUTING -d 192.0.2.9 -j MARK --set-mark 2\n-A PREROUTING -d 192.0.2.9 -p udp --dport 1:65535 -j MARK --set-mark 2\n",
		"-A PREROUTING -d 127.0.0.1/32 -p tcp --dport 80 -j MARK --set-mark 1\n",
		"-A PREROUTING -d 10.9.0.1/32 -p tcp --dport 80 -j MARK --set-mark 1\n",
		"-A PREROUTING -d 2001:db8::1 -p tcp --dport 80 -j MARK --set-mark 3\n",
		"ip daddr { 192.0.2.1, 192.0.2.2 } tcp dport { 80, 443, 8000-8010 } meta mark set 0x00000002\n",
		"ip daddr 192.0.2.1 tcp dport 80 meta mark set 2\n",
		"ip daddr { 192.0.2.1 tcp dport { 80 meta mark set 1\n",
		"meta mark set 1 mark set 2 ip daddr 192.0.2.3\n",
		"-A \"\n-A X -j MARK\n-A X -j MARK --set-mark\n",
		"ip daddr 192.0.2.4 th dport { " + strings.Repeat("1, ", 40) + "2 } mark set 3\n",
	} {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		dir := t.TempDir()
		rules := filepath.Join(dir, "rules")
		if err := os.WriteFile(rules, input, 0o600); err != nil {
			t.Fatal(err)
		}
		for format, text := range fwmarkConfigs {
			src := filepath.Join(dir, format)
			if err := os.WriteFile(src, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, partial := range []bool{false, true} {
				convertsSafely(t, len(input), Options{Partial: partial, FwmarkRules: rules}, func(opts Options) (*Result, error) {
					return formats[format](src, opts)
				})
			}
		}
	})
}
