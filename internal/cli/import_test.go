package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// runImport runs `sluice import args...` in-process and returns stdout, stderr and its error.
func runImport(args ...string) (string, string, error) {
	root := rootCmd()
	var out, errOut bytes.Buffer
	root.SetArgs(append([]string{"import"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

const importTestdata = "../importer/testdata/"

// TestImportPartial: --partial prints what converts with a comment for each thing left out,
// says so on stderr and exits 3; without --partial the same file is refused and nothing is
// printed.
func TestImportPartial(t *testing.T) {
	src := importTestdata + "partial/nftlb-mixed.json"
	out, stderr, err := runImport("--partial", "nftlb", src)
	if !errors.Is(err, exitStatus(ExitPartial)) {
		t.Fatalf("import --partial: %v, want exit status %d", err, ExitPartial)
	}
	if !strings.Contains(out, "# sluice import: "+src+":13: helper ftp refused") {
		t.Errorf("stdout has no comment for the ftp farm:\n%s", out)
	}
	if _, err := config.Parse("out.yaml", []byte(out)); err != nil {
		t.Errorf("the output does not validate: %v", err)
	}
	want := "sluice import: 2 services converted, 4 left out: " + src + ":3, " + src + ":12, " + src + ":16, " + src + ":21\n"
	if stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	out, _, err = runImport("nftlb", src)
	if err == nil || out != "" || !strings.Contains(err.Error(), src+":13: helper ftp refused") {
		t.Errorf("import without --partial: %v, printed %q; want a refusal at line 13 and nothing printed", err, out)
	}
}

// TestImportPartialNothingLeftOut: --partial of a file that converts whole exits 0.
func TestImportPartialNothingLeftOut(t *testing.T) {
	out, stderr, err := runImport("--partial", "ipvsadm", importTestdata+"ipvsadm/lab.save")
	if err != nil || out == "" || !strings.Contains(stderr, "0 left out") {
		t.Errorf("import --partial: %v, stderr %q", err, stderr)
	}
}

// TestImportWarnsRepeatedKeys: a key repeated in nftlb's JSON is a warning on stderr.
func TestImportWarnsRepeatedKeys(t *testing.T) {
	src := importTestdata + "nftlb/repeated-keys.json"
	_, stderr, err := runImport("nftlb", src)
	if err != nil || !strings.Contains(stderr, "warning: "+src+`:14: key "ether-addr" is repeated (first at line 13)`) {
		t.Errorf("import: %v, stderr %q", err, stderr)
	}
}
