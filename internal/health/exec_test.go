package health

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// shell is an exec check running script with /bin/sh.
func shell(script string) config.HealthCheck {
	return config.HealthCheck{Type: "exec", Command: []string{"/bin/sh", "-c", script}}
}

func TestExec(t *testing.T) {
	t.Setenv("SLUICE_TEST_INHERITED", "yes")
	target := netip.MustParseAddrPort("192.0.2.7:8080")
	for _, tc := range []struct {
		name   string
		hc     config.HealthCheck
		target netip.AddrPort
		ok     bool
		want   string
	}{
		{"exit 0", shell("echo fine"), target, true, "exit status 0"},
		{"exit 1 with output", shell("echo not ready >&2; exit 1"), target, false, "exit status 1: not ready"},
		{"environment", shell(`echo "$SLUICE_BACKEND_ADDRESS $SLUICE_BACKEND_PORT"; exit 3`), target,
			false, "exit status 3: 192.0.2.7 8080"},
		{"environment ipv6", shell(`echo "$SLUICE_BACKEND_ADDRESS $SLUICE_BACKEND_PORT"; exit 3`),
			netip.MustParseAddrPort("[2001:db8::1]:53"), false, "exit status 3: 2001:db8::1 53"},
		{"placeholders", config.HealthCheck{Type: "exec", Command: []string{"/bin/sh", "-c", `echo "$1|$2"; exit 3`,
			"sh", "{address}", "port={port}"}}, target, false, "exit status 3: 192.0.2.7|port=8080"},
		{"placeholders ipv6, one argument each", config.HealthCheck{Type: "exec", Command: []string{"/bin/sh", "-c",
			`echo "$# $1"; exit 3`, "sh", "{address} {port}"}}, netip.MustParseAddrPort("[2001:db8::1]:53"),
			false, "exit status 3: 1 2001:db8::1 53"},
		{"daemon environment kept", shell(`test "$SLUICE_TEST_INHERITED" = yes`), target, true, "exit status 0"},
		{"missing command", config.HealthCheck{Type: "exec", Command: []string{"/nonexistent/check"}}, target,
			false, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantResult(t, check(t, tc.hc, tc.target, probeTimeout), tc.ok, tc.want)
		})
	}
}

func TestExecOutputClipped(t *testing.T) {
	r := check(t, shell("printf '%0500d' 0; exit 1"), netip.MustParseAddrPort("192.0.2.7:80"), probeTimeout)
	want := "exit status 1: " + strings.Repeat("0", maxOutput)
	if r.OK || r.Message != want {
		t.Errorf("result OK=%v %q, want a failure %q", r.OK, r.Message, want)
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The background sleep keeps the output open and outlives the shell unless its group is killed.
	script := "echo started; sleep 60 & echo $! > " + pidFile + "; wait"
	r := check(t, shell(script), netip.MustParseAddrPort("192.0.2.7:80"), 100*time.Millisecond)
	wantResult(t, r, false, "timed out after 100ms: started")

	text, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(text)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the background sleep to die", func() bool { return !running(pid) })
}

// running tells whether process pid exists and is not a zombie.
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "123 (sleep) S ...".
	_, after, _ := bytes.Cut(stat, []byte(") "))
	return !bytes.HasPrefix(after, []byte("Z"))
}
