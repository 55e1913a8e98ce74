package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/testutil"
)

// refused fails t unless err refuses path as something other than a regular file.
func refused(t *testing.T, what string, err error, p testutil.IrregularPath) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), p.Path) || !strings.Contains(err.Error(), p.Kind+", not a regular file") {
		t.Errorf("%s of a %s: %v, want a refusal naming %s as %s, not a regular file", what, p.Name, err, p.Path, p.Kind)
	}
}

// endless reads as an endless stream of "a", like a pipe that never closes.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// validate runs `sluice validate -f file` in-process with stdin and returns its error.
func validate(stdin io.Reader, file string) error {
	root := rootCmd()
	root.SetArgs([]string{"validate", "-f", file})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetIn(stdin)
	return root.Execute()
}

// `sluice validate -f /dev/zero` grew to 1.4 GB; a FIFO hung it. Both are refused before a read.
func TestValidateRefusesWhatIsNotARegularFile(t *testing.T) {
	refused(t, "validate -f /dev/zero", validate(nil, "/dev/zero"),
		testutil.IrregularPath{Name: "device", Path: "/dev/zero", Kind: "a character device"})
	for _, p := range testutil.IrregularPaths(t) {
		refused(t, "validate -f", validate(nil, p.Path), p)
	}
}

func TestValidateRefusesAConfigOverTheLimit(t *testing.T) {
	big := testutil.OversizeFile(t, boundedread.ConfigBytes)
	if err := validate(nil, big); err == nil || !strings.Contains(err.Error(), big+": larger than 32 MiB") {
		t.Errorf("validate -f a file of 32 MiB + 1: %v, want larger than 32 MiB", err)
	}
	if err := validate(endless{}, "-"); err == nil || !strings.Contains(err.Error(), "stdin: larger than 32 MiB") {
		t.Errorf("validate -f - of an endless stream: %v, want stdin: larger than 32 MiB", err)
	}
}

func TestTokenFileIsBounded(t *testing.T) {
	token := func(path string) error {
		_, err := readToken(&serveOptions{listen: "127.0.0.1:9", tokenFile: path})
		return err
	}
	for _, p := range testutil.IrregularPaths(t) {
		refused(t, "--token-file", token(p.Path), p)
	}
	big := testutil.OversizeFile(t, boundedread.TokenBytes)
	if err := token(big); err == nil || !strings.Contains(err.Error(), "larger than 4 KiB") {
		t.Errorf("--token-file of 4 KiB + 1: %v, want larger than 4 KiB", err)
	}
	good := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(good, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := token(good); err != nil {
		t.Errorf("--token-file of a good token: %v", err)
	}
}

// A FIFO at /etc/services hung `sluice list`; what is not a regular file, or too large, names no port.
func TestServiceNamesReadsOnlyABoundedRegularFile(t *testing.T) {
	for _, p := range testutil.IrregularPaths(t) {
		if names := serviceNames(p.Path); len(names) != 0 {
			t.Errorf("serviceNames(%s) = %v, want none", p.Name, names)
		}
	}
	big := filepath.Join(t.TempDir(), "services")
	line := []byte("http 80/tcp\n")
	if err := os.WriteFile(big, bytes.Repeat(line, (1<<20)/len(line)+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if names := serviceNames(big); len(names) != 0 {
		t.Errorf("serviceNames of a file over 1 MiB = %v, want none", names)
	}
	small := filepath.Join(t.TempDir(), "services")
	if err := os.WriteFile(small, line, 0o600); err != nil {
		t.Fatal(err)
	}
	if names := serviceNames(small); names["80/tcp"] != "http" {
		t.Errorf("serviceNames of a small file = %v, want 80/tcp http", names)
	}
}
