package ebpf

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPinPathMustBeOnBPFFS refuses a pin path that is not on a BPF filesystem, and makes nothing.
func TestPinPathMustBeOnBPFFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sluice")
	err := preparePinPath(dir)
	if err == nil || !strings.Contains(err.Error(), "not on a BPF filesystem") {
		t.Errorf("preparePinPath(%s) = %v", dir, err)
	}
	if pathExists(dir) {
		t.Errorf("%s was made", dir)
	}
}
