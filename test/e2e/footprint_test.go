package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/engine"
)

// startDaemonWithMetrics is startDaemon with the daemon's metrics listener on addr, an address of
// the balancer namespace (the daemon lives there).
func startDaemonWithMetrics(t *testing.T, config, addr string) *daemon {
	t.Helper()
	return startDaemon(t, config, "--metrics-listen", addr)
}

// exited tells whether the daemon's process has ended, and how.
func (d *daemon) exited() (bool, error) {
	select {
	case err := <-d.done:
		d.done <- err // stop still reads it
		return true, err
	default:
		return false, nil
	}
}

// footprint is the daemon's resource use at one moment.
type footprint struct {
	RSS, PeakRSS int64 // bytes: VmRSS and VmHWM of /proc/PID/status
	Threads      int
	FDs          int // open file descriptors (/proc/PID/fd)
	Goroutines   int // go_goroutines of the metrics listener
	Conntrack    int // entries of the balancer namespace's conntrack table
}

// measureFootprint reads the daemon's /proc entries and scrapes its metrics listener at addr.
func measureFootprint(pid int, addr string) (footprint, error) {
	var fp footprint
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fp, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, value, _ := strings.Cut(line, ":")
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch key {
		case "VmRSS":
			fp.RSS = n << 10
		case "VmHWM":
			fp.PeakRSS = n << 10
		case "Threads":
			fp.Threads = int(n)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return fp, err
	}
	fp.FDs = len(fds)
	metrics, err := scrape(addr)
	if err != nil {
		return fp, err
	}
	fp.Goroutines = int(metrics["go_goroutines"])
	err = theLab.Do(theLab.BalancerNS(), func() error {
		// /proc/sys/net resolves to the namespace of the thread that opens it.
		b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
		if err == nil {
			fp.Conntrack, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err
	})
	return fp, err
}

// scrape reads the unlabelled series of the metrics listener at addr in the balancer namespace.
func scrape(addr string) (map[string]float64, error) {
	var body []byte
	err := theLab.Do(theLab.BalancerNS(), func() error {
		c, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
			return err
		}
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n"); err != nil {
			return err
		}
		body, err = io.ReadAll(c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	head, text, ok := strings.Cut(string(body), "\r\n\r\n")
	if status, _, _ := strings.Cut(head, "\r\n"); !ok || !strings.HasPrefix(status, "HTTP/1.") || !strings.Contains(status, " 200 ") {
		return nil, fmt.Errorf("scrape %s: bad response %.200q", addr, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, nil
}

// seenEvent is a daemon event and when the test saw it (its own clock, like every other time of
// the soak; the event's Time is the daemon's).
type seenEvent struct {
	engine.Event
	Seen time.Time
}

// eventFollower long-polls the daemon's events, as `sluice events -f` does, and keeps them all.
type eventFollower struct {
	mu     sync.Mutex
	events []seenEvent
	errs   []string // failed polls
	wake   chan struct{}
}

func followEvents(ctx context.Context, c *api.Client) *eventFollower {
	f := &eventFollower{wake: make(chan struct{})}
	go func() {
		var since uint64
		for ctx.Err() == nil {
			events, err := c.Events(ctx, since, 10*time.Second)
			now := time.Now()
			f.mu.Lock()
			if err != nil && ctx.Err() == nil {
				f.errs = append(f.errs, err.Error())
			}
			for _, e := range events {
				f.events = append(f.events, seenEvent{e, now})
				since = e.ID
			}
			close(f.wake)
			f.wake = make(chan struct{})
			f.mu.Unlock()
			if err != nil {
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	return f
}

// lastID is the ID of the newest event seen so far.
func (f *eventFollower) lastID() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) == 0 {
		return 0
	}
	return f.events[len(f.events)-1].ID
}

// await returns the first event after the ID after that matches, waiting up to limit for it.
func (f *eventFollower) await(after uint64, limit time.Duration, match func(engine.Event) bool) (seenEvent, bool) {
	timeout := time.After(limit)
	for {
		f.mu.Lock()
		for _, e := range f.events {
			if e.ID > after && match(e.Event) {
				f.mu.Unlock()
				return e, true
			}
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-timeout:
			return seenEvent{}, false
		}
	}
}

// all returns every event seen and the poll errors.
func (f *eventFollower) all() ([]seenEvent, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenEvent(nil), f.events...), append([]string(nil), f.errs...)
}
