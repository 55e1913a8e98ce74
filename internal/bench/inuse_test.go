package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestRefuseExistingLab(t *testing.T) {
	e := NewEnv("sluice-inuse-test"+strconv.Itoa(os.Getpid()), 1, "sluice", "sluice-lab", NewProgress(nil))
	e.Lab.StateDir = filepath.Join(t.TempDir(), "lab")
	if err := e.RefuseExistingLab(context.Background()); err != nil {
		t.Fatalf("no lab of the prefix: %v", err)
	}
	if err := os.Mkdir(e.Lab.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := e.RefuseExistingLab(context.Background())
	if err == nil || !strings.Contains(err.Error(), "state dir "+e.Lab.StateDir) || !strings.Contains(err.Error(), "--reuse-lab") {
		t.Fatalf("a lab's state dir left: %v", err)
	}
}
