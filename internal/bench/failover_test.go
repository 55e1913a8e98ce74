package bench

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
)

// TestFailoverTable checks the table: a row per event, a column per datapath and mode, each cell
// broken/total (reconvergence), "-" where nothing was measured, and the broken cells explained.
func TestFailoverTable(t *testing.T) {
	r := &FailoverResults{
		Options:  FailoverOptions{Datapaths: []string{"nft", "ebpf"}, Modes: []string{"nat"}, Events: []string{"node-death", "drain"}, Conns: 2, NewRate: 1},
		Backends: 3,
		Cells: []FailoverCell{
			{Event: "node-death", Datapath: "nft", Mode: "nat", Broken: 0, Total: 30, ReconvergeS: 0.41},
			{Event: "node-death", Datapath: "ebpf", Mode: "nat", LongLived: 2, LongLivedBroken: 1, BrokenAtS: []float64{0.2},
				NewConns: 28, NewFailed: 1, Broken: 2, Total: 30, ReconvergeS: 0.38, Errors: []string{"long-lived: reset"}},
		},
	}
	out := r.Table()
	for _, want := range []string{"NFT-NAT", "EBPF-NAT", "0/30 (0.4s)", "2/30 (0.4s)",
		"node-death ebpf-nat: 1 of 2 long-lived (requests sent at 0.20..0.20s), 1 of 28 new", "long-lived: reset"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	var drain string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "drain") {
			drain = line
		}
	}
	if got := strings.Join(strings.Fields(drain), " "); got != "drain - -" {
		t.Errorf("the unmeasured drain row is not two dashes: %q", drain)
	}
	if strings.Contains(out, "node-death nft-nat:") {
		t.Errorf("a cell with nothing broken is explained:\n%s", out)
	}
}

// TestErrorClass checks that a broken connection's error is named without its addresses, so
// that the cell keeps one error per cause.
func TestErrorClass(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("read tcp 10.91.1.2:61000->10.91.9.100:80: %w", syscall.ECONNRESET): "reset",
		fmt.Errorf("read: %w", io.ErrUnexpectedEOF):                                    "closed by the other end",
		fmt.Errorf("status 502 Bad Gateway, close false"):                              "status 502 Bad Gateway, close false",
	} {
		if got := errorClass(err); got != want {
			t.Errorf("errorClass(%v) = %q, want %q", err, got, want)
		}
	}
}
