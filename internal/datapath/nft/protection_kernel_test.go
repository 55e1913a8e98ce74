package nft

import (
	"os"
	"testing"
)

// strictTCPTracking sets nf_conntrack_tcp_loose=0 in the test's namespace, as syn_protection needs
// (checkSynproxySysctl).
func strictTCPTracking(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(tcpLoose, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
}
