package nft

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// renderVersionFile records, for RenderVersion, the hash of every golden rendering: the rulesets
// of testdata/golden and the transactions of testdata/transitions.
const renderVersionFile = "testdata/render-version.txt"

// TestRenderVersionFollowsTheGoldens fails when a golden rendering changed while RenderVersion
// stayed: a binary that renders other rules must not start from another's last apply (it would
// take the tables for what it renders). New cases only need `go test -update`.
func TestRenderVersionFollowsTheGoldens(t *testing.T) {
	now := goldenHashes(t)
	version, recorded := readRenderVersion(t)
	if version == RenderVersion {
		for name, h := range recorded {
			if now[name] != "" && now[name] != h {
				t.Fatalf("the rendering of %s changed while RenderVersion stayed %d: bump RenderVersion in committed.go, then go test -update", name, version)
			}
		}
	}
	if *update {
		writeRenderVersion(t, now)
		return
	}
	if version != RenderVersion {
		t.Fatalf("%s records RenderVersion %d, the package is at %d: go test -update", renderVersionFile, version, RenderVersion)
	}
	for name := range now {
		if recorded[name] == "" {
			t.Errorf("%s does not record the case %s: go test -update", renderVersionFile, name)
		}
	}
}

// goldenHashes hashes each golden rendering, by its path under testdata.
func goldenHashes(t *testing.T) map[string]string {
	t.Helper()
	var paths []string
	for _, pattern := range []string{"testdata/golden/*/ruleset.nft", "testdata/transitions/*/tx.nft"} {
		found, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, found...)
	}
	if len(paths) == 0 {
		t.Fatal("no golden renderings")
	}
	out := map[string]string{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(p, "testdata/")] = fmt.Sprintf("%x", sha256.Sum256(data))
	}
	return out
}

// readRenderVersion reads renderVersionFile: its version and hashes (none when it is missing).
func readRenderVersion(t *testing.T) (int, map[string]string) {
	t.Helper()
	data, err := os.ReadFile(renderVersionFile)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	hashes := map[string]string{}
	version := 0
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "version":
			if version, err = strconv.Atoi(f[1]); err != nil {
				t.Fatalf("%s: %q", renderVersionFile, line)
			}
		case len(f) == 2:
			hashes[f[0]] = f[1]
		case len(f) != 0 && !strings.HasPrefix(f[0], "#"):
			t.Fatalf("%s: %q", renderVersionFile, line)
		}
	}
	return version, hashes
}

func writeRenderVersion(t *testing.T, hashes map[string]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# The golden renderings of nft.RenderVersion (TestRenderVersionFollowsTheGoldens).\n")
	fmt.Fprintf(&b, "version %d\n", RenderVersion)
	names := make([]string, 0, len(hashes))
	for name := range hashes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s %s\n", name, hashes[name])
	}
	if err := os.WriteFile(renderVersionFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
