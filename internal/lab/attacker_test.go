package lab

import (
	"slices"
	"testing"
)

func TestAttackerPlan(t *testing.T) {
	plain, attacked := New("x", 3), New("x", 3)
	attacked.Attacker = true
	requireDistinctAddressesAndNames(t, attacked)
	if slices.Contains(plain.Namespaces(), plain.AttackerNS()) {
		t.Errorf("a lab without an attacker lists %s", plain.AttackerNS())
	}
	if !slices.Contains(attacked.Namespaces(), "x-attacker") || !slices.Contains(attacked.links()["x-lb"], "eth2") {
		t.Errorf("the attacker lab lacks x-attacker or x-lb/eth2: %v %v", attacked.Namespaces(), attacked.links())
	}
	fleet := New("x", 3)
	fleet.Attacker, fleet.Balancers = true, 2
	if fleet.validate() == nil {
		t.Error("validate accepted an attacker in a fleet")
	}
}
