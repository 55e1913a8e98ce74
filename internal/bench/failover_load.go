package bench

// The load of a failover cell: long-lived keep-alive connections making a request every
// requestPause, and new connections at a steady rate, from the lab's client to the VIP.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// maxErrors bounds the distinct errors a cell keeps.
const maxErrors = 4

// failoverLoad is the load of one cell, running until finish.
type failoverLoad struct {
	l    *lab.Lab
	to   netip.AddrPort
	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	longLived int
	broken    int
	requests  int
	slowest   time.Duration
	newConns  int
	newFailed int
	errors    []string
	// brokenAt are the times the requests that broke their long-lived connection were sent.
	brokenAt []time.Time
	// local are the client's ends of the long-lived connections that opened.
	local []netip.AddrPort
}

// startLoad opens conns long-lived connections to to from the lab's client (a connection that
// cannot be opened counts as broken) and starts the new connections at rate a second.
func startLoad(l *lab.Lab, to netip.AddrPort, conns, rate int) *failoverLoad {
	f := &failoverLoad{l: l, to: to, stop: make(chan struct{}), longLived: conns}
	for range conns {
		var c net.Conn
		err := l.Do(l.ClientNS(), func() (err error) {
			c, err = (&net.Dialer{Timeout: stallLimit}).Dial("tcp", to.String())
			return err
		})
		if err != nil {
			f.fail(fmt.Errorf("dial: %w", err), time.Now())
			continue
		}
		f.local = append(f.local, netip.MustParseAddrPort(c.LocalAddr().String()))
		f.wg.Go(func() { f.keepAlive(c) })
	}
	f.wg.Go(func() { f.pace(rate) })
	return f
}

// fail counts a long-lived connection broken by a request sent at, and keeps its error if it is
// a new one.
func (f *failoverLoad) fail(err error, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broken++
	f.brokenAt = append(f.brokenAt, at)
	f.noteError("long-lived: " + errorClass(err))
}

// errorClass names what broke a connection without the addresses and ports that would make
// every connection's error a distinct one.
func errorClass(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "no answer within " + stallLimit.String()
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed by the other end"
	}
	return err.Error()
}

// noteError keeps msg among the first maxErrors distinct errors; f.mu is held.
func (f *failoverLoad) noteError(msg string) {
	if len(f.errors) < maxErrors && !slices.Contains(f.errors, msg) {
		f.errors = append(f.errors, msg)
	}
}

// keepAlive makes a request on c every requestPause until the load finishes or one fails.
func (f *failoverLoad) keepAlive(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		t0 := time.Now()
		err := keepAliveGet(c, br)
		f.mu.Lock()
		f.requests++
		if err == nil {
			f.slowest = max(f.slowest, time.Since(t0))
		}
		f.mu.Unlock()
		if err != nil {
			f.fail(err, t0)
			return
		}
		select {
		case <-f.stop:
			return
		case <-time.After(requestPause):
		}
	}
}

// keepAliveGet makes one HTTP/1.1 request on c and reads the whole answer, within stallLimit.
func keepAliveGet(c net.Conn, br *bufio.Reader) error {
	if err := c.SetDeadline(time.Now().Add(stallLimit)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"); err != nil {
		return err
	}
	// http.ReadResponse only parses bytes from the reader; it opens no connection.
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return fmt.Errorf("status %s, close %v", resp.Status, resp.Close)
	}
	return nil
}

// pace opens a new connection (one request) every 1/rate s until the load finishes, each in a
// goroutine of its own so that a slow one does not hold the next back.
func (f *failoverLoad) pace(rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
			f.wg.Go(f.newConn)
		}
	}
}

// newConn makes one request on a new connection and counts it.
func (f *failoverLoad) newConn() {
	var ok bool
	err := f.l.Do(f.l.ClientNS(), func() error {
		ok = httpOnce(f.to, time.Now().Add(stallLimit))
		return nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.newConns++
	if err != nil || !ok {
		f.newFailed++
		f.noteError("new connection: no answer within " + stallLimit.String())
	}
}

// finish stops the load, waits for the requests under way (each ends within stallLimit) and
// returns the cell's counts, the broken connections' times from event.
func (f *failoverLoad) finish(event time.Time) FailoverCell {
	close(f.stop)
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	var at []float64
	for _, t := range f.brokenAt {
		at = append(at, math.Round(t.Sub(event).Seconds()*100)/100)
	}
	slices.Sort(at)
	return FailoverCell{
		BrokenAtS: at, LongLived: f.longLived, LongLivedBroken: f.broken, Requests: f.requests, SlowestS: f.slowest.Seconds(),
		NewConns: f.newConns, NewFailed: f.newFailed,
		Broken: f.broken + f.newFailed, Total: f.longLived + f.newConns, Errors: slices.Clone(f.errors),
	}
}

// waitAnswered waits until a request on a new connection to to is answered, up to limit.
func waitAnswered(ctx context.Context, l *lab.Lab, to netip.AddrPort, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var ok bool
		if err := l.Do(l.ClientNS(), func() error {
			ok = httpOnce(to, time.Now().Add(time.Second))
			return nil
		}); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer after %s", to, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
