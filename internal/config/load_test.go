package config_test

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// A config that is a symbolic link to /dev/zero ran the reader out of memory, a FIFO hung it.
func TestLoadRefusesWhatIsNotARegularFile(t *testing.T) {
	for _, p := range testutil.IrregularPaths(t) {
		_, err := config.Load(p.Path)
		if err == nil || !strings.Contains(err.Error(), p.Path+": is "+p.Kind+", not a regular file") {
			t.Errorf("Load of a %s: %v, want %s refused as not a regular file", p.Name, err, p.Path)
		}
	}
	big := testutil.OversizeFile(t, boundedread.ConfigBytes)
	if _, err := config.Load(big); err == nil || !strings.Contains(err.Error(), big+": larger than 32 MiB") {
		t.Errorf("Load of 32 MiB + 1: %v, want larger than 32 MiB", err)
	}
}
