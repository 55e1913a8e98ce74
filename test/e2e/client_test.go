package e2e

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Client-side timeouts: they only bound a broken request so that it counts as a failure; no
// assertion depends on them.
const (
	dialTimeout    = 5 * time.Second
	requestTimeout = 5 * time.Second
	udpTimeout     = 2 * time.Second
)

// stallThreshold is the one timing threshold of the suite: a single request taking this long is
// a stall. A connection whose SYN is dropped or answered wrongly (say, a backend still holding the
// 4-tuple in TIME_WAIT replies with a bare ACK, or the balancer drops the SYN of a reused port)
// is only retried when the client's initial retransmission timeout expires, which is 1 s on
// Linux; every healthy request in the lab completes in well under a millisecond. So a request of
// >= 1 s is the signature of a SYN retransmission, not of a slow machine.
const stallThreshold = time.Second

// backendRE matches a lab backend's reply, HTTP body or UDP payload: "bN\n".
var backendRE = regexp.MustCompile(`^b[0-9]+\n$`)

// backendOf checks a reply and returns the backend name it carries ("b2").
func backendOf(reply string) (string, error) {
	if !backendRE.MatchString(reply) {
		return "", fmt.Errorf("reply %q is not a lab backend's", reply)
	}
	return strings.TrimSuffix(reply, "\n"), nil
}

// inClient runs fn on a locked OS thread inside the lab's client namespace; sockets fn creates
// live there (and may be used from anywhere afterwards).
func inClient(fn func() error) error { return theLab.Do(theLab.ClientNS(), fn) }

// httpOnce makes one HTTP/1.0 request on a new TCP connection and returns the backend that
// answered. It reads to EOF, so the server closes first and the TIME_WAIT state stays on the
// backend, as with real clients of a load balancer. Call it inside inClient.
func httpOnce(to netip.AddrPort) (string, error) { return httpFrom(to, 0) }

// httpFrom is httpOnce from a given local port (0: the kernel picks one), bound with
// SO_REUSEADDR as a client that reuses its ports quickly does.
func httpFrom(to netip.AddrPort, localPort int) (string, error) {
	d := net.Dialer{Timeout: dialTimeout}
	if localPort != 0 {
		d.LocalAddr = &net.TCPAddr{Port: localPort}
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var err error
			if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }); cerr != nil {
				return cerr
			}
			return err
		}
	}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: vip\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := io.ReadAll(c)
	if err != nil {
		return "", fmt.Errorf("after %d bytes: %w", len(resp), err)
	}
	head, body, ok := strings.Cut(string(resp), "\r\n\r\n")
	if !ok || !strings.HasPrefix(head, "HTTP/1.1 200 ") {
		return "", fmt.Errorf("bad response %q", resp)
	}
	return backendOf(body)
}

// udpOnce sends one datagram from a new socket (a new source port) and returns the backend that
// answered. The socket is connected, so only a reply from the queried address is accepted (for
// DSR the backend answers from the VIP itself). Call it inside inClient.
func udpOnce(to netip.AddrPort) (string, error) { return udpFrom(to, 0) }

// keepAlive is one long-lived HTTP/1.1 connection.
type keepAlive struct {
	c  net.Conn
	br *bufio.Reader
	// timeout bounds one request (0: requestTimeout).
	timeout time.Duration
}

// dialKeepAlive opens a connection from the client namespace.
func dialKeepAlive(t *testing.T, to netip.AddrPort) *keepAlive {
	t.Helper()
	var c net.Conn
	if err := inClient(func() (err error) {
		c, err = (&net.Dialer{Timeout: dialTimeout}).Dial("tcp", to.String())
		return err
	}); err != nil {
		t.Fatalf("dial %s: %v", to, err)
	}
	k := &keepAlive{c: c, br: bufio.NewReader(c)}
	t.Cleanup(func() { c.Close() })
	return k
}

// get sends one request on the connection and returns the backend that answered.
func (k *keepAlive) get() (string, error) {
	if err := k.c.SetDeadline(time.Now().Add(cmp.Or(k.timeout, requestTimeout))); err != nil {
		return "", err
	}
	if _, err := io.WriteString(k.c, "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"); err != nil {
		return "", err
	}
	// http.ReadResponse only parses bytes from the reader; it opens no connection.
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return "", fmt.Errorf("status %s, close %v, body %q", resp.Status, resp.Close, body)
	}
	return backendOf(string(body))
}

// tally sums up a batch of requests.
type tally struct {
	Requests   int
	PerBackend map[string]int
	Failures   int
	FirstErrs  []string // the first few failures
	Stalls     int      // requests that took >= stallThreshold
	MaxLatency time.Duration
	Elapsed    time.Duration
}

const keptErrors = 5

func (a *tally) add(backend string, err error, latency time.Duration) {
	a.Requests++
	a.MaxLatency = max(a.MaxLatency, latency)
	if latency >= stallThreshold {
		a.Stalls++
	}
	if err != nil {
		a.Failures++
		if len(a.FirstErrs) < keptErrors {
			a.FirstErrs = append(a.FirstErrs, err.Error())
		}
		return
	}
	a.PerBackend[backend]++
}

func (a *tally) merge(b *tally) {
	a.Requests += b.Requests
	for k, v := range b.PerBackend {
		a.PerBackend[k] += v
	}
	a.Failures += b.Failures
	a.FirstErrs = append(a.FirstErrs, b.FirstErrs[:min(len(b.FirstErrs), keptErrors-min(keptErrors, len(a.FirstErrs)))]...)
	a.Stalls += b.Stalls
	a.MaxLatency = max(a.MaxLatency, b.MaxLatency)
}

// Backends lists the backends that answered, sorted.
func (a *tally) Backends() []string { return slices.Sorted(maps.Keys(a.PerBackend)) }

func (a *tally) String() string {
	rate := float64(a.Requests) / a.Elapsed.Seconds()
	return fmt.Sprintf("%d requests, %d failures, %d stalls (>= %v), max latency %v, elapsed %v, %.0f/s, per backend %v",
		a.Requests, a.Failures, a.Stalls, stallThreshold, a.MaxLatency.Round(time.Microsecond),
		a.Elapsed.Round(time.Millisecond), rate, a.PerBackend)
}

// requireNoFailures fails the test when any request failed, quoting the first errors.
func (a *tally) requireNoFailures(t *testing.T) {
	t.Helper()
	if a.Failures > 0 {
		t.Errorf("%d of %d requests failed; first errors:\n  %s", a.Failures, a.Requests, strings.Join(a.FirstErrs, "\n  "))
	}
}

// hammer makes n requests from the client namespace with the given number of parallel workers,
// each a goroutine on its own OS thread in the namespace running once in a loop.
func hammer(t *testing.T, workers, n int, once func() (string, error)) *tally {
	t.Helper()
	var next atomic.Int64
	parts := make([]*tally, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		parts[w] = &tally{PerBackend: map[string]int{}}
		wg.Go(func() {
			part := parts[w]
			err := inClient(func() error {
				for next.Add(1) <= int64(n) {
					t0 := time.Now()
					backend, err := once()
					part.add(backend, err, time.Since(t0))
				}
				return nil
			})
			if err != nil {
				part.add("", fmt.Errorf("worker %d: %w", w, err), 0)
			}
		})
	}
	wg.Wait()
	total := &tally{PerBackend: map[string]int{}, Elapsed: time.Since(start)}
	for _, p := range parts {
		total.merge(p)
	}
	return total
}
