package importer

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicelb/sluice/internal/testutil"
)

// write writes files (name: content) into a new directory and returns the path of the first
// name given.
func write(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i+1 < len(files); i += 2 {
		if err := os.WriteFile(filepath.Join(dir, files[i]), []byte(files[i+1]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, files[0])
}

// refused converts path with convert, expecting an error that matches want, within maxAlloc
// bytes allocated; it returns the error's text.
func refused(t *testing.T, convert converter, path, want string, maxAlloc uint64) string {
	t.Helper()
	var res *Result
	var err error
	n := testutil.Allocated(func() { res, err = convert(path, Options{}) })
	if err == nil {
		out, _ := res.YAML()
		t.Fatalf("converted:\n%.2000s", out)
	}
	if !regexp.MustCompile(want).MatchString(err.Error()) {
		t.Errorf("error %.2000q does not match %q", err, want)
	}
	if n > maxAlloc {
		t.Errorf("allocated %d bytes, want at most %d", n, maxAlloc)
	}
	return err.Error()
}

const vs = "virtual_server 10.0.0.1 80 {\n    lb_algo rr\n    real_server 10.0.1.1 80 {\n    }\n}\n"

func TestKeepalivedIncludeDevZero(t *testing.T) {
	path := write(t, "k.conf", "include zero\n"+vs)
	if err := os.Symlink("/dev/zero", filepath.Join(filepath.Dir(path), "zero")); err != nil {
		t.Fatal(err)
	}
	refused(t, Keepalived, path, `k\.conf:1: include .*/zero: is a character device, not a regular file`, 1<<20)
}

func TestKeepalivedIncludeFIFO(t *testing.T) {
	path := write(t, "k.conf", vs+"include fifo\n")
	if err := syscall.Mkfifo(filepath.Join(filepath.Dir(path), "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused(t, Keepalived, path, `k\.conf:6: include .*/fifo: is a FIFO, not a regular file`, 1<<20)
}

func TestKeepalivedIncludeNotFollowedPastTheLimits(t *testing.T) {
	t.Run("fan-out", func(t *testing.T) {
		// Each file includes the next one 16 times: 16^6 files without a count limit.
		var files []string
		for i := range 6 {
			files = append(files, fmt.Sprintf("f%d.conf", i), strings.Repeat(fmt.Sprintf("include f%d.conf\n", i+1), 16))
		}
		files = append(files, "f6.conf", vs)
		path := write(t, files...)
		refused(t, Keepalived, path, `f[0-9]\.conf:[0-9]+: include "f[0-9]\.conf": more than 256 included files in all`, 4<<20)
	})
	t.Run("depth", func(t *testing.T) {
		path := write(t, "k.conf", vs+"include k.conf\n")
		refused(t, Keepalived, path, `k\.conf:6: includes nest deeper than 8`, 4<<20)
	})
	t.Run("bytes", func(t *testing.T) {
		big := strings.Repeat("# a comment of a line that is long enough to fill the file in few lines\n", (boundedread16MiB-1)/72)
		path := write(t, "k.conf", vs+strings.Repeat("include big.conf\n", 5), "big.conf", big)
		refused(t, Keepalived, path, `k\.conf:10: include .*big\.conf: the config and its includes take more than 64 MiB`, 96<<20)
	})
}

// boundedread16MiB is boundedread.ImportBytes, the most one file may hold.
const boundedread16MiB = 16 << 20

func TestKeepalivedNesting(t *testing.T) {
	path := write(t, "k.conf", vs+strings.Repeat("x {\n", 200_000))
	refused(t, Keepalived, path, `k\.conf:70: blocks nest deeper than 64`, 16<<20)
}

func TestKeepalivedLongLine(t *testing.T) {
	path := write(t, "k.conf", vs+"virtual_server_group g {\n"+strings.Repeat("x", MaxLineBytes+1)+"\n}\n")
	refused(t, Keepalived, path, `k\.conf:7: a line longer than 64 KiB`, 4<<20)
}

func TestKeepalivedNUL(t *testing.T) {
	path := write(t, "k.conf", vs+"global_defs {\n router_id a\x00b\n}\n")
	refused(t, Keepalived, path, `k\.conf:7: a NUL byte`, 1<<20)
}

// group is a virtual_server_group of n ranges of 256 addresses.
func group(n int) string {
	var b strings.Builder
	b.WriteString("virtual_server_group g {\n")
	for i := range n {
		fmt.Fprintf(&b, "    10.1.%d.0-255 80\n", i)
	}
	b.WriteString("}\n")
	return b.String()
}

func TestKeepalivedGroupExpansion(t *testing.T) {
	t.Run("addresses", func(t *testing.T) {
		// Virtual servers that are refused still expand their group: 40*256 addresses each.
		src := group(40) + strings.Repeat("virtual_server group g {\n    lb_algo dh\n}\n", 20)
		path := write(t, "k.conf", src)
		refused(t, Keepalived, path, `k\.conf:[0-9]+: virtual_server group g: the groups' ranges expand to more than 65536 addresses in all`, 64<<20)
	})
	t.Run("services", func(t *testing.T) {
		src := group(40) + strings.Repeat("virtual_server group g {\n    lb_algo rr\n    real_server 10.2.0.1 80 {\n    }\n}\n", 20)
		path := write(t, "k.conf", src)
		refused(t, Keepalived, path, `k\.conf:[0-9]+: more than 16384 services, the most Sluice's datapaths hold: import the config in parts`, 256<<20)
	})
}

// TestKeepalivedGroupManyPorts: a group naming one address on more ports than a service lists
// is refused at the member past the limit, without comparing every port with every other.
func TestKeepalivedGroupManyPorts(t *testing.T) {
	var b strings.Builder
	b.WriteString("virtual_server_group g {\n")
	for p := 1; p <= 60000; p++ {
		fmt.Fprintf(&b, "    10.0.0.1 %d\n", p)
	}
	b.WriteString("}\nvirtual_server group g {\n    real_server 10.0.1.1 80\n}\n")
	path := write(t, "k.conf", b.String())
	refused(t, Keepalived, path, regexp.QuoteMeta(path)+`:34: tcp 10\.0\.0\.1: more than 32 ports`, 256<<20)
}

func TestKeepalivedDuplicateRealServers(t *testing.T) {
	src := "virtual_server 10.0.0.1 80 {\n" + strings.Repeat("    real_server 10.0.1.1 80\n", 30_000) + "}\n"
	path := write(t, "k.conf", src)
	msg := refused(t, Keepalived, path, `^.*k\.conf:3: real_server 10\.0\.1\.1 is already at .*k\.conf:2: the backends of a service are distinct destinations\n`, 48<<20)
	if lines := strings.Count(msg, "\n") + 1; lines != maxShownErrors+1 || !strings.Contains(msg, "and 29949 more refusals from here on") {
		t.Errorf("%d lines of errors, want %d and a count of the rest:\n%.3000s", lines, maxShownErrors+1, msg)
	}
}

func TestKeepalivedIncludeShadowShowsNothing(t *testing.T) {
	const secret = "root:$y$j9T$Vb2lQEzFi5Srn1yL7bK1s.$9RHkCJtOE0ugCuW1Vs0k2vNYKXKcH7oQ:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"
	for name, src := range map[string]string{
		"top":            vs + "include shadow\n",
		"virtual_server": "virtual_server 10.0.0.1 80 {\n    include shadow\n    real_server 10.0.1.1 80\n}\n",
		"real_server":    "virtual_server 10.0.0.1 80 {\n    real_server 10.0.1.1 80 {\n        include shadow\n    }\n}\n",
		"group":          "virtual_server_group g {\n    include shadow\n}\nvirtual_server group g {\n    real_server 10.0.1.1 80\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := write(t, "k.conf", src, "shadow", secret)
			msg := refused(t, Keepalived, path, `shadow:1: `, 1<<20)
			for _, leak := range []string{"Vb2lQ", "root", "daemon", "19000"} {
				if strings.Contains(msg, leak) {
					t.Errorf("the error shows %q of the included file:\n%s", leak, msg)
				}
			}
		})
	}
}

func TestIpvsadmLongLine(t *testing.T) {
	path := write(t, "s", "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.0.1.1:80 -m\n# "+strings.Repeat("x", MaxLineBytes)+"\n")
	refused(t, Ipvsadm, path, `/s:3: a line longer than 64 KiB: not an ipvsadm -Sn save file`, 1<<20)
}

func TestIpvsadmServices(t *testing.T) {
	var b strings.Builder
	for i := range MaxServices + 1 {
		fmt.Fprintf(&b, "-A -t 10.%d.%d.1:80 -s rr\n", i>>8, i&255)
	}
	path := write(t, "s", b.String())
	refused(t, Ipvsadm, path, `/s:16385: more than 16384 services`, 64<<20)
}

// TestIpvsadmManyRealServers converts 10,000 real servers of one service, which the
// duplicate check once compared pairwise.
func TestIpvsadmManyRealServers(t *testing.T) {
	var b strings.Builder
	b.WriteString("-A -t 10.0.0.1:80 -s rr\n")
	for i := range 10_000 {
		fmt.Fprintf(&b, "-a -t 10.0.0.1:80 -r 10.%d.%d.%d:80 -m\n", 1+i>>16, i>>8&255, i&255)
	}
	path := write(t, "s", b.String())
	res, err := Ipvsadm(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Services[0].Backends); n != 10_000 {
		t.Errorf("%d backends, want 10000", n)
	}
}

// ports is a virtual-ports list of n ports: 1,3,5…
func ports(n int) string {
	list := make([]string, n)
	for i := range list {
		list[i] = strconv.Itoa(2*i + 1)
	}
	return strings.Join(list, ",")
}

// TestRefusesWhatValidateRefuses converts sources whose services Sluice's config validation
// refuses: each fails at the line of the virtual or real server, and nothing is printed.
func TestRefusesWhatValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, format, src, want string
	}{
		{"keepalived duplicate virtual servers", "keepalived", vs + vs,
			`src:6: refused: Sluice would not take the converted service tcp-10-0-0-1-80-2: tcp 10\.0\.0\.1:80 overlaps services\[0\]`},
		{"keepalived vip 0.0.0.0", "keepalived", strings.Replace(vs, "10.0.0.1", "0.0.0.0", 1),
			`src:1: refused: Sluice would not take the converted service tcp-0-0-0-0-80 \(vip\): "0\.0\.0\.0" cannot be used`},
		{"keepalived real server is the vip", "keepalived", strings.Replace(vs, "10.0.1.1", "10.0.0.1", 1),
			`src:3: refused: Sluice would not take the converted backend 10\.0\.0\.1 of service tcp-10-0-0-1-80 \(address\): 10\.0\.0\.1 is the service's own vip`},
		{"keepalived real server 127.0.0.1", "keepalived", strings.Replace(vs, "10.0.1.1", "127.0.0.1", 1),
			`src:3: refused: Sluice would not take the converted backend 127\.0\.0\.1 .*loopback`},
		{"keepalived zone", "keepalived", strings.Replace(vs, "10.0.0.1", "fe80::1%eth0", 1),
			`src:1: virtual_server: "fe80::1%eth0" has a zone \(%eth0\): Sluice takes addresses without one \(write fe80::1\)`},
		{"keepalived no service", "keepalived", "global_defs {\n}\n", `src:1: no service to import`},
		{"ipvsadm port 0", "ipvsadm", "-A -t 10.0.0.1:0 -s rr -p 300\n", `src:1: port 0 \(every port of a persistent service\) refused`},
		{"ipvsadm thresholds", "ipvsadm", "-A -t 10.0.0.1:80 -s wlc\n-a -t 10.0.0.1:80 -r 10.0.1.1:80 -m -x 5 -y 10\n",
			`src:2: refused: Sluice would not take the converted backend 10\.0\.1\.1 of service tcp-10-0-0-1-80 \(min_connections\)`},
		{"ipvsadm zone", "ipvsadm", "-A -t [fe80::1%eth0]:80 -s rr\n", `src:1: -t: "\[fe80::1%eth0\]" has a zone`},
		{"ipvsadm real server zone", "ipvsadm", "-A -t [fd00::1]:80 -s rr\n-a -t [fd00::1]:80 -r [fe80::2%eth0]:80 -m\n", `src:2: -r: "\[fe80::2%eth0\]" has a zone`},
		{"ipvsadm service twice", "ipvsadm", "-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.1:80 -s wlc\n", `src:2: tcp 10\.0\.0\.1:80 is added twice \(first at line 1\)`},
		{"ipvsadm -t twice", "ipvsadm", "-A -t 10.0.0.1:80 -t 10.0.0.2:80 -s rr\n", `src:1: -t is given twice`},
		{"ipvsadm real server twice", "ipvsadm", "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.0.1.1:80 -m\n-a -t 10.0.0.1:80 -r 10.0.1.1:80 -m\n",
			`src:3: 10\.0\.1\.1:80 is added twice to tcp 10\.0\.0\.1:80 \(first at line 2\)`},
		{"ipvsadm empty", "ipvsadm", "# nothing\n", `src:1: no service to import`},
		{"nftlb ports twice", "nftlb", `{"farms":[{"name":"web","virtual-addr":"10.0.0.1","virtual-ports":"80,80","backends":[{"name":"a","ip-addr":"10.0.1.1"}]}]}`,
			`src:1: virtual-ports "80,80": "80" is listed twice: a port is one service's`},
		{"nftlb 33 ports", "nftlb", `{"farms":[{"name":"web","virtual-addr":"10.0.0.1","virtual-ports":"` + ports(33) + `","backends":[{"name":"a","ip-addr":"10.0.1.1"}]}]}`,
			`src:1: refused: Sluice would not take the converted service tcp-10-0-0-1-1_and32 \(ports\): 33 entries, over the limit of 32`},
		{"nftlb zone", "nftlb", `{"farms":[{"name":"web","virtual-addr":"fe80::1%eth0","virtual-ports":"80","backends":[{"name":"a","ip-addr":"fe80::2"}]}]}`,
			`src:1: virtual-addr: "fe80::1%eth0" has a zone`},
		{"nftlb backend twice", "nftlb", "{\"farms\":[{\"name\":\"web\",\"virtual-addr\":\"10.0.0.1\",\"virtual-ports\":\"80\",\"backends\":[\n{\"name\":\"a\",\"ip-addr\":\"10.0.1.1\"},\n{\"name\":\"b\",\"ip-addr\":\"10.0.1.1\"}]}]}",
			`src:3: backend b 10\.0\.1\.1 is already the backend at line 2`},
		{"nftlb null", "nftlb", `null`, `src:1: not an nftlb config`},
		{"nftlb list", "nftlb", `[]`, `src:1: not an nftlb config`},
		{"nftlb empty", "nftlb", `{}`, `src:1: no service to import`},
		{"nftlb farms off", "nftlb", `{"farms":[{"name":"web","state":"off"}]}`, `src:1: no service to import`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, "src", tc.src)
			refused(t, formats[tc.format], path, "^"+regexp.QuoteMeta(filepath.Dir(path))+"/"+tc.want, 1<<20)
		})
	}
}
