package e2e

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

// floodFor bounds the SYN flood: a few seconds at hping3's full speed.
const floodFor = 3 * time.Second

// TestSYNFlood floods an nft nat service with spoofed SYNs from the lab's client (hping3
// --flood --rand-source) for a few seconds. A connection established before the flood keeps
// working through it; once it ends, the half-open entries expire by Sluice's conntrack timeout
// policy (5 s, not the kernel's 60 s for SYN_RECV) and new connections are served again. The
// same flood with the policy's rule deleted is measured beside it, for the log.
func TestSYNFlood(t *testing.T) {
	requireLab(t)
	hping, err := exec.LookPath("hping3")
	if err != nil {
		testutil.Missing(t, "needs hping3 (scripts/deps.sh installs it): %v", err)
	}
	f := nftFlavors[0]
	svc := webService("maglev", equalPool(false))
	freshBalancer(t)
	t.Cleanup(func() { flush(t) })
	applyFresh(t, f.Config(svc))
	lb := theLab.BalancerNS()
	max := conntrackCount(t, lb, "nf_conntrack_max")

	k := dialKeepAlive(t, svc.Addr())
	held, err := k.get()
	if err != nil {
		t.Fatal(err)
	}
	flood := func(policy string) (peak, after int) {
		base := conntrackCount(t, lb, "nf_conntrack_count")
		peak = floodPeak(t, hping, svc.Addr().Addr().String(), lb)
		if got, err := k.get(); err != nil || got != held {
			t.Fatalf("%s: the connection established before the flood: %q, %v", policy, got, err)
		}
		// The half-open entries expire: the table falls back to where it was within the policy's
		// 5 s (plus the conntrack garbage collector's pace); without it they stay for 60 s.
		limit := 30 * time.Second
		if policy == "without the policy" {
			limit = 8 * time.Second
		}
		start := time.Now()
		for after = conntrackCount(t, lb, "nf_conntrack_count"); after > base+100 && time.Since(start) < limit; after = conntrackCount(t, lb, "nf_conntrack_count") {
			time.Sleep(200 * time.Millisecond)
		}
		if after > base+100 {
			// nf_conntrack_count still holds expired entries until the conntrack garbage collector
			// reaps them (it may wait up to a minute); a dump leaves them out, and so does the
			// insert path, which reaps expired entries as it meets them.
			after = liveConntrackEntries(t, lb)
		}
		t.Logf("%s: peak %d of %d conntrack entries (%.0f%%) during a %v flood; %d entries %v after it (before: %d)",
			policy, peak, max, 100*float64(peak)/float64(max), floodFor, after, time.Since(start).Round(100*time.Millisecond), base)
		return peak, after
	}
	if _, after := flood("with the policy"); after > max/100 {
		sample := run(t, "ip", "netns", "exec", lb, "sh", "-c", "conntrack -L 2>/dev/null | head -5")
		t.Fatalf("with the policy the flood's entries did not expire: %d left, such as\n%s", after, sample.Stdout)
	}
	res := hammer(t, workers, 200, func() (string, error) { return httpOnce(svc.Addr()) })
	res.requireNoFailures(t)

	// The same flood without the policy's rule, for comparison; then the table is emptied.
	deleteCTTimeoutRule(t, lb)
	t.Cleanup(func() { freshBalancer(t) })
	flood("without the policy")
}

// floodPeak runs the flood from the client namespace and returns the highest conntrack count of
// the balancer's namespace seen meanwhile.
func floodPeak(t *testing.T, hping, vip, lb string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), floodFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", theLab.ClientNS(), hping, "-S", "-p", "80", "--flood", "--rand-source", "-q", vip)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	peak := 0
	wg.Go(func() {
		for ctx.Err() == nil {
			peak = max(peak, conntrackCount(t, lb, "nf_conntrack_count"))
			time.Sleep(100 * time.Millisecond)
		}
	})
	_ = cmd.Wait() // killed at floodFor
	wg.Wait()
	return max(peak, conntrackCount(t, lb, "nf_conntrack_count"))
}

// liveConntrackEntries counts the entries of a namespace's conntrack table that have not expired.
func liveConntrackEntries(t *testing.T, ns string) int {
	t.Helper()
	r := run(t, "ip", "netns", "exec", ns, "sh", "-c", "conntrack -L 2>/dev/null | wc -l")
	n, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Err != nil || err != nil {
		t.Fatalf("counting conntrack entries: %v %v: %s", r.Err, err, r.Stderr)
	}
	return n
}

func conntrackCount(t *testing.T, ns, name string) int {
	t.Helper()
	n, err := strconv.Atoi(readSysctl(t, ns, "net.netfilter."+name))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// deleteCTTimeoutRule deletes the `ct timeout set` rules of the balancer's service chains.
func deleteCTTimeoutRule(t *testing.T, ns string) {
	t.Helper()
	r := run(t, "ip", "netns", "exec", ns, "nft", "-a", "list", "table", "inet", "sluice")
	if r.Err != nil {
		t.Fatalf("nft list: %v: %s", r.Err, r.Stderr)
	}
	chain := ""
	for _, line := range strings.Split(r.Stdout, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "chain" {
			chain = fields[1]
		}
		if strings.Contains(line, "ct timeout set") {
			handle := fields[len(fields)-1]
			if d := run(t, "ip", "netns", "exec", ns, "nft", "delete", "rule", "inet", "sluice", chain, "handle", handle); d.Err != nil {
				t.Fatalf("nft delete rule: %v: %s", d.Err, d.Stderr)
			}
		}
	}
}
