package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// RefuseExistingLab returns an error when a lab with the environment's prefix exists (one of its
// namespaces, or its state dir): a benchmark tears its lab down at the end, and so would take down
// another lab, and a daemon running in it.
func (e *Env) RefuseExistingLab(ctx context.Context) error {
	s, err := e.Lab.Status(ctx)
	if err != nil {
		return fmt.Errorf("--prefix %s: looking for a lab of that prefix: %w", e.Lab.Prefix, err)
	}
	var found []string
	for _, ns := range s.Namespaces {
		if ns.Exists {
			found = append(found, "namespace "+ns.Name)
		}
	}
	if _, err := os.Stat(e.Lab.StateDir); err == nil {
		found = append(found, "state dir "+e.Lab.StateDir)
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("--prefix %s: a lab with this prefix exists (%s), which the benchmark would tear down: pick another --prefix, remove it with `sluice-lab down --prefix %s`, or give --reuse-lab",
		e.Lab.Prefix, strings.Join(found, ", "), e.Lab.Prefix)
}
