package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/mdsh"
)

// The docs run as written: every command of a fenced sh block of README.md and docs/*.md runs, in
// the document's order, in one bash session per document, from a copy of the checkout, against
// the lab the README builds (prefix "sluice", the default). A command must exit 0 (sluice plan and
// --dry-run: 0 or 2, their "changes" status). What cannot run here is listed in notRun with the
// reason; production paths the lab keeps elsewhere are translated by labPaths.

// docsLabPrefix is the lab the docs name (sluice-lb, sluice-client): `sluice-lab up`'s default.
const docsLabPrefix = "sluice"

// docsInOrder are the documents with sh blocks, in the order an operator meets them; each needs
// what the ones before it left (the lab torn down by the README is rebuilt by a later setup).
var docsInOrder = []string{
	"README.md", "docs/config.md", "docs/api.md", "docs/operations.md", "docs/scale-out.md",
	"docs/BENCHMARKS.md", "docs/migrating.md",
}

// docSetup is what a document assumes has been done before its first command (from the README).
var docSetup = map[string][]string{
	"docs/api.md": {
		"sluice-lab up",
		"sluice --netns sluice-lb serve -c examples/lab-nat.yaml --metrics-listen 127.0.0.1:9120 &",
		"ip netns exec sluice-lb curl -sf --retry 30 --retry-all-errors --retry-delay 1 http://127.0.0.1:9120/readyz",
	},
}

// notRun are commands of the docs that this test does not run, by their first words, and why.
var notRun = map[string]string{
	"make test":                       "the suite this test is part of",
	"make unit":                       "the unit tests of make test, which runs this test",
	"make lint":                       "make test runs it before this test",
	"apt-get install":                 "installs into the host's packages; packaging/TestDeb installs the .deb into a scratch root",
	"make install":                    "installs into the host; packaging/TestDeb runs make install into a scratch DESTDIR",
	"systemctl":                       "the host's systemd",
	"curl -s -H \"Authorization":      "needs a daemon with --listen and a token file; internal/cli's listener tests cover the TCP API",
	"sudo bin/sluice-lab bench lb":    "26 minutes with every peer; TestBenchLB runs it short",
	"sudo bin/sluice-lab bench scale": "6 to 8 minutes; TestBenchScale runs it short",
	"sudo bin/sluice-lab bench fleet": "5 minutes; TestBenchFleet runs it short",
	"sudo bin/sluice-lab bench flood": "3 minutes with the peers; TestBenchFlood runs it short",
	"sudo bin/sluice-lab bench pps":   "5 minutes with the peers; TestBenchPPS runs it short",
	"sudo bin/sluice-lab bench net":   "sluice-lab bench net runs as written in README.md",
}

// labPaths translate the production paths of the docs to the lab's: the daemon of sluice-lb listens
// on that namespace's socket, and /etc belongs to the host.
func labPaths(work string) *strings.Replacer {
	return strings.NewReplacer(
		"/run/sluice/sluice.sock", "/run/sluice/netns/"+docsLabPrefix+"-lb/sluice.sock",
		"/etc/sluice/", filepath.Join(work, "etc/sluice")+"/",
	)
}

func TestDocsRunInTheLab(t *testing.T) {
	requireLab(t)
	docsLab := lab.New(docsLabPrefix, labBackends)
	claimDocsLabs(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	work := copyCheckout(t, root)
	if err := os.MkdirAll(filepath.Join(work, "etc/sluice"), 0o755); err != nil {
		t.Fatal(err)
	}
	statesBefore := netnsStateDirs()
	// The daemons' state and sockets of the lab's namespaces go after each document, so that one
	// document's API changes never meet the next one's daemon.
	removeStates := func() {
		for dir := range netnsStateDirs() {
			if !statesBefore[dir] {
				_ = os.RemoveAll(dir)
			}
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := docsLab.Down(ctx); err != nil {
			t.Errorf("lab %s down: %v", docsLabPrefix, err)
		}
		removeStates()
	})
	var checked []string
	for _, doc := range docsInOrder {
		t.Run(strings.ReplaceAll(doc, "/", "_"), func(t *testing.T) {
			cmds := readBlocks(t, filepath.Join(root, doc))
			script := docScript(doc, docSetup[doc], cmds, labPaths(work))
			defer removeStates()
			runDocScript(t, doc, work, script)
		})
		checked = append(checked, doc)
	}
	// A new document with sh blocks must join the run.
	all, _ := filepath.Glob(filepath.Join(root, "docs/*.md"))
	for _, path := range append(all, filepath.Join(root, "README.md")) {
		rel, _ := filepath.Rel(root, path)
		if len(readBlocks(t, path)) > 0 && !slices.Contains(checked, rel) {
			t.Errorf("%s has sh blocks but is not in docsInOrder", rel)
		}
	}
}

func readBlocks(t *testing.T, path string) []mdsh.Command {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmds, err := mdsh.Blocks(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cmds
}

// docScript is the bash script that runs a document's commands one by one and stops at the first
// that fails, naming its line.
func docScript(doc string, setup []string, cmds []mdsh.Command, paths *strings.Replacer) string {
	var b strings.Builder
	b.WriteString("set -o pipefail\n")
	for _, line := range setup {
		fmt.Fprintf(&b, "echo '## setup: %s'\n%s\n", quoteless(line), line)
		fmt.Fprintf(&b, "rc=$?; [ $rc -eq 0 ] || { echo \"## %s setup failed (exit $rc): %s\"; exit 1; }\n", doc, quoteless(line))
	}
	for _, c := range cmds {
		if reason, skip := skipped(c.Text); skip {
			fmt.Fprintf(&b, "echo '## %s:%d not run (%s): %s'\n", doc, c.Line, quoteless(reason), quoteless(firstLine(c.Text)))
			continue
		}
		fmt.Fprintf(&b, "echo '## %s:%d: %s'\n%s\n", doc, c.Line, quoteless(firstLine(c.Text)), paths.Replace(c.Text))
		allowed := "[ $rc -eq 0 ]"
		if changesStatus(c.Text) {
			allowed = "[ $rc -eq 0 ] || [ $rc -eq 2 ]"
		}
		fmt.Fprintf(&b, "rc=$?; %s || { echo \"## FAILED %s:%d (exit $rc)\"; exit 1; }\n", allowed, doc, c.Line)
	}
	b.WriteString("echo '## done'\n")
	return b.String()
}

func skipped(cmd string) (string, bool) {
	for prefix, reason := range notRun {
		if strings.HasPrefix(cmd, prefix) {
			return reason, true
		}
	}
	return "", false
}

// changesStatus tells whether the command exits 2 when it finds changes (plan, --dry-run).
func changesStatus(cmd string) bool {
	return strings.HasPrefix(cmd, "sluice plan") || strings.Contains(cmd, "--dry-run")
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }

// quoteless makes s safe inside single quotes of the generated script.
func quoteless(s string) string { return strings.ReplaceAll(s, "'", "") }

// docsTimeout bounds one document's run: the README's includes make demo and bench net.
const docsTimeout = 8 * time.Minute

// runDocScript runs script with bash in work, in a process group of its own, which is killed
// afterwards with whatever the document left running (daemons started with &).
func runDocScript(t *testing.T, doc, work, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), docsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", script)
	cmd.Dir = work
	// An operator's shell: no namespace chosen, not inside the make that runs the suite.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"SLUICE_NETNS", "SLUICE_SOCKET", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}, name)
	})
	if doc != "README.md" { // the README builds bin/sluice and bin/sluice-lab and puts them on PATH itself
		binDir := filepath.Join(work, "bin")
		ensureBinariesIn(t, binDir)
		cmd.Env = append(cmd.Env, "PATH="+binDir+":"+os.Getenv("PATH"))
	}
	// A file, not a pipe: daemons the document left running hold it open past the shell's exit.
	out, err := os.CreateTemp(t.TempDir(), "output")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Start()
	if err == nil {
		err = cmd.Wait()
	}
	stopGroup(cmd)
	text, _ := os.ReadFile(out.Name())
	t.Logf("%s:\n%s", doc, text)
	if err != nil {
		t.Fatalf("%s: %v (output above)", doc, err)
	}
}

// stopGroup ends what a document's shell left running: SIGTERM, then SIGKILL after 10 s.
func stopGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // nothing left
	}
	for range 100 {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// ensureBinariesIn puts the suite's sluice and sluice-lab in dir when the README's make build did
// not.
func ensureBinariesIn(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{sluiceBin, sluiceLabBin} {
		dst := filepath.Join(dir, filepath.Base(bin))
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		if out, err := exec.Command("cp", bin, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
	}
}

// copyCheckout copies the checkout's files (tracked, and untracked ones git does not ignore) to a
// temporary directory, so that what the docs write (bin/, sluice.schema.json) stays out of it.
func copyCheckout(t *testing.T, root string) string {
	t.Helper()
	work := t.TempDir()
	files, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the working tree, or not a file
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	// The pinned tools make test installed (make demo's deps would build them again: 100 s).
	tools := filepath.Join(root, "bin/tools")
	if _, err := os.Stat(tools); err == nil {
		if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", tools, filepath.Join(work, "bin")+"/").CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v: %s", tools, err, out)
		}
	}
	return work
}

// netnsStateDirs are the per-namespace state and socket directories of the docs lab's namespaces.
func netnsStateDirs() map[string]bool {
	dirs := map[string]bool{}
	for _, parent := range []string{"/var/lib/sluice/netns", "/run/sluice/netns"} {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), docsLabPrefix+"-") && !strings.HasPrefix(e.Name(), docsLabPrefix+"-bench") {
				dirs[filepath.Join(parent, e.Name())] = true
			}
		}
	}
	return dirs
}

// docsLabPrefixes are the labs the docs' commands build: the README's, make demo's and bench's
// defaults. Their names are fixed, so one run at a time on a host may build them: it claims them
// in docsOwnerFile (its pid, under an flock held while the test runs), and its supervisor tears
// them down at its end only when the claim is still its own (the test was killed before its
// cleanup), never another run's.
var docsLabPrefixes = []string{docsLabPrefix, "sluice-demo", "sluice-bench"}

// docsOwnerFile holds the pid of the run that owns the docs labs.
const docsOwnerFile = "/run/sluice-lab/docs-owner"

// claimDocsLabs makes this run the owner of the docs labs, or skips t when another run holds them
// or one of them exists already (an operator's: the docs would tear it down).
func claimDocsLabs(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(docsOwnerFile), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(docsOwnerFile+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		t.Skipf("another run's docs test holds %s: the docs' labs have fixed names", docsOwnerFile+".lock")
	}
	t.Cleanup(func() { f.Close() }) // releases the flock, after the labs are down (cleanups run last in, first out)
	if owner, err := os.ReadFile(docsOwnerFile); err == nil && !docsLabsOwnedBy(runOwner) {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(owner)))
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			t.Skipf("the run of pid %d owns the docs labs", pid)
		}
		// The owner is gone, and left its labs: they are ours to take down.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, prefix := range docsLabPrefixes {
			if err := lab.New(prefix, labBackends).Down(ctx); err != nil {
				t.Fatalf("lab %s of the gone run %d: %v", prefix, pid, err)
			}
		}
	}
	for _, prefix := range docsLabPrefixes {
		if labExists(prefix) && !docsLabsOwnedBy(runOwner) {
			t.Skipf("a lab %q exists on this host: the docs build labs of that name; take it down (sluice-lab down --prefix %s) to run this test", prefix, prefix)
		}
	}
	if err := os.WriteFile(docsOwnerFile, []byte(strconv.Itoa(runOwner)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(releaseDocsLabs)
}

// docsLabsOwnedBy tells whether the run of pid owns the docs labs.
func docsLabsOwnedBy(pid int) bool {
	b, err := os.ReadFile(docsOwnerFile)
	return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid)
}

// releaseDocsLabs gives up the claim on the docs labs.
func releaseDocsLabs() { _ = os.Remove(docsOwnerFile) }

// labExists tells whether a namespace of the lab with this prefix exists.
func labExists(prefix string) bool {
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `-(client|lb|lb[0-9]+|router|sw|b[0-9]+)$`)
	return slices.ContainsFunc(namespacesWithPrefix(prefix), re.MatchString)
}
