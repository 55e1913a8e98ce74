package engine

import (
	"context"
	"strings"
	"testing"
	"time"
)

const fullNATFleetConfig = `
bgp:
  asn: 65100
  peers: [{address: 10.9.0.1, asn: 65000}]
  fullnat_sources: [10.91.5.1, 10.91.5.2, 10.91.5.3]
services:
  - name: api
    vip: 10.0.0.3
    port: 80
    mode: fullnat
    fullnat_source: 10.91.5.2
    backends: [{address: 10.0.1.1}]
`

// TestFullNATSourcesAnnounced: a node announces its own fullnat source as it does a VIP and the
// other nodes' as backups (med 100, local_pref 50), and withdraws them all when it is drained.
func TestFullNATSourcesAnnounced(t *testing.T) {
	h, speaker := startAnnouncing(t, fullNATFleetConfig)
	announces(t, speaker, "10.0.0.3/32", "10.91.5.1/32", "10.91.5.2/32", "10.91.5.3/32")
	speaker.mu.Lock()
	for _, a := range speaker.announced {
		backup := a.Prefix.String() == "10.91.5.1/32" || a.Prefix.String() == "10.91.5.3/32"
		isBackup := a.MED != nil && *a.MED == 100 && a.LocalPref != nil && *a.LocalPref == 50
		if backup != isBackup {
			t.Errorf("%s: attributes %+v, want backup %v", a.Prefix, a.Attributes, backup)
		}
	}
	speaker.mu.Unlock()
	view, _ := h.BGP(context.Background())
	if own := viewOf(view, "10.91.5.2"); own.Role != RoleFullNATSource || len(own.Services) != 1 || own.Services[0] != "api" {
		t.Errorf("own source: %+v", own)
	}
	if other := viewOf(view, "10.91.5.3"); other.Role != RoleBackupFullNATSource || !strings.Contains(other.Reason, "backup") {
		t.Errorf("another node's source: %+v", other)
	}
	if _, err := h.DrainNode(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	announces(t, speaker)
	h.UndrainNode()
	announces(t, speaker, "10.0.0.3/32", "10.91.5.1/32", "10.91.5.2/32", "10.91.5.3/32")
}
