package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

const changeConfig = `services:
  - name: web
    vip: 192.0.2.10
    port: 80
    backends:
      - {address: 10.0.0.1, port: 8080}
      - {address: 10.0.0.2, port: 8080}
`

// changeDaemon runs an engine over the fake datapath behind the API, its config file
// (changeConfig) at path.
func changeDaemon(t *testing.T) (url, path string) { return fakeDaemon(t, changeConfig) }

// fakeDaemon runs an engine over the fake datapath behind the API, its config file (text) at path.
func fakeDaemon(t *testing.T, text string) (url, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(cfg, engine.Options{ConfigPath: path, Datapath: fake.New(), Log: slog.New(slog.DiscardHandler),
		MinApplyInterval: time.Millisecond, Resync: time.Hour,
		NewAnnouncer: func(func(bgp.Event)) engine.Announcer { return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	srv := httptest.NewServer(api.NewHandler(e, api.Info{ConfigFile: path}))
	t.Cleanup(srv.Close)
	return srv.URL, path
}

// sluiceCLI runs a command line with stdin and returns its output and error.
func sluiceCLI(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	root := rootCmd()
	root.SetArgs(args)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetIn(strings.NewReader(stdin))
	err := root.Execute()
	return out.String(), err
}

// TestChangesPrintTheirDiffAndExitStatus: apply, plan and --dry-run print what changes, "no
// changes" when nothing does; plan and dry runs exit 2 when something would change.
func TestChangesPrintTheirDiffAndExitStatus(t *testing.T) {
	url, path := changeDaemon(t)
	changed := strings.Replace(changeConfig, "port: 80\n", "port: 80\n    mode: fullnat\n", 1) + "      - {address: 10.0.0.3, port: 8080, weight: 2}\n"
	file := filepath.Join(t.TempDir(), "changed.yaml")
	if err := os.WriteFile(file, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	isChanges := func(err error) bool { return errors.Is(err, exitStatus(ExitChanges)) }

	if out, err := sluiceCLI(t, "", "--api", url, "plan", "-f", path); err != nil || out != "no changes\n" {
		t.Fatalf("plan of the running file: %q %v", out, err)
	}
	out, err := sluiceCLI(t, "", "--api", url, "plan", "-f", file)
	want := "~ service web (tcp 192.0.2.10:80): "
	if !isChanges(err) || !strings.HasPrefix(out, want) || !strings.Contains(out, "    ~ mode: nat -> fullnat\n    + backend 10.0.0.3:8080 weight 2\nservices: 1 changed (dry run: nothing changed)\n") {
		t.Fatalf("plan of a changed file: exit %v, printed\n%s", err, out)
	}
	out, err = sluiceCLI(t, changed, "--api", url, "plan", "-f", "-", "-o", "json")
	var change plan.Change
	if !isChanges(err) || json.Unmarshal([]byte(out), &change) != nil || len(change.Services) != 1 || change.Services[0].Fields[0].To != "fullnat" {
		t.Fatalf("plan -f - -o json: exit %v, printed %s", err, out)
	}

	if out, err := sluiceCLI(t, "", "--api", url, "apply", "-f", file); err != nil || !strings.HasPrefix(out, want) || strings.Contains(out, "dry run") {
		t.Fatalf("apply of a changed file: %v, printed\n%s", err, out)
	}
	if out, err := sluiceCLI(t, "", "--api", url, "apply", "-f", file); err != nil || out != "no changes\n" {
		t.Fatalf("apply of the same file again: %q %v", out, err)
	}
	out, err = sluiceCLI(t, "", "--api", url, "backend", "drain", "web", "10.0.0.1:8080", "--dry-run")
	if !isChanges(err) || !strings.Contains(out, "    ~ backend 10.0.0.1:8080 weight 1 -> 0\n") {
		t.Fatalf("drain --dry-run: exit %v, printed\n%s", err, out)
	}
	if out, err := sluiceCLI(t, "", "--api", url, "backend", "weight", "web", "10.0.0.1:8080", "1", "--dry-run"); err != nil || out != "no changes\n" {
		t.Fatalf("a dry run that changes nothing: %q %v", out, err)
	}

	if err := os.WriteFile(path, []byte(strings.Replace(changeConfig, "port: 8080}", "port: 80800}", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sluiceCLI(t, "", "--api", url, "reload"); err == nil || !strings.Contains(err.Error(), "sluice.yaml:6: services[0].backends[0].port") {
		t.Fatalf("reload of a broken file: %v, want its file:line error", err)
	}
}

// TestKernelConfigRoundTrip: what a datapath holds, read back, plans as the file it came from;
// a change of the file shows against it.
func TestKernelConfigRoundTrip(t *testing.T) {
	file := changeConfig + `  - name: dns
    vip: fd00::53
    port: 53-54
    protocol: udp
    scheduler: rr
    fallback: reject
    backends: [{address: fd00::1, weight: 3}, {address: fd00::2, weight: 0}]
`
	cfg, err := config.Parse("test.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dp := fake.New()
	if err := dp.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	status, err := dp.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	held, err := kernelConfig(cfg, status)
	if err != nil {
		t.Fatal(err)
	}
	before, err := plan.Build(held, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := plan.Diff(before, p); !c.Empty() {
		t.Fatalf("the kernel's own config differs from the file: %+v", c.Services)
	}
	cfg.Services[0].Backends = cfg.Services[0].Backends[:1]
	after, err := plan.Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := plan.Diff(before, after); len(c.Services) != 1 || c.Services[0].Backends[0].Backend != "10.0.0.2:8080" || c.Moved["web"] < 0.4 || c.Moved["web"] > 0.6 {
		t.Fatalf("removing a backend: %+v", c.Services)
	}
}

// TestPrintChangeShowsBGP: a change of the bgp section alone is printed, not "no changes", and a
// dry run of it exits 2.
func TestPrintChangeShowsBGP(t *testing.T) {
	c := plan.Change{BGP: []plan.BGPChange{
		{Op: plan.OpChange, Field: "bgp.asn", From: "65100", To: "65101"},
		{Op: plan.OpAdd, Field: "bgp.peers[10.9.0.2]", To: "port 179, asn 65000"},
		{Op: plan.OpRemove, Field: "bgp.peers[10.9.0.3]", From: "port 179, asn 65000"},
	}}
	var out bytes.Buffer
	err := reportChange(&out, changeFlags{dryRun: true, output: "table"}, c)
	want := "~ bgp.asn: 65100 -> 65101\n+ bgp.peers[10.9.0.2]: port 179, asn 65000\n- bgp.peers[10.9.0.3]: port 179, asn 65000\nbgp: 3 changed (dry run: nothing changed)\n"
	if !errors.Is(err, exitStatus(ExitChanges)) || out.String() != want {
		t.Fatalf("exit %v, printed\n%s\nwant\n%s", err, out.String(), want)
	}
}
