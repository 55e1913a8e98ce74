package nft

import (
	"context"
	"testing"
)

// TestKernelCTTimeoutNamesByName finds no policy before the first ensureCTTimeouts and both
// after it, which then has nothing more to create.
func TestKernelCTTimeoutNamesByName(t *testing.T) {
	inFreshNetns(t, func() {
		if have, err := ctTimeoutNames(); err != nil || len(have) != 0 {
			t.Fatalf("before any apply: %v, %v; want none", have, err)
		}
		if created, err := ensureCTTimeouts(context.Background()); err != nil || !created {
			t.Fatalf("ensureCTTimeouts: %v, %v; want them created", created, err)
		}
		have, err := ctTimeoutNames()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ctTimeouts {
			if !have[c.name] {
				t.Errorf("policy %s not found after it was created: %v", c.name, have)
			}
		}
		if created, err := ensureCTTimeouts(context.Background()); err != nil || created {
			t.Errorf("ensureCTTimeouts again: %v, %v; want nothing to create", created, err)
		}
	})
}
