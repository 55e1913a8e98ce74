package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The servers the check tests run in a backend's namespace: their sockets are opened there (lab
// Do) and served by goroutines of the test process. Each answers right or wrong as the test
// flips it, and stops with the test.

// responderDeadline bounds one exchange with a prober, so that a stuck one frees its goroutine.
const responderDeadline = 5 * time.Second

// listenIn opens a TCP listener on port in the namespace of lab backend i, closed with t.
func listenIn(t *testing.T, i, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := theLab.Do(theLab.BackendNS(i), func() (err error) {
		ln, err = net.Listen("tcp", ":"+strconv.Itoa(port))
		return err
	}); err != nil {
		t.Fatalf("listen on tcp port %d in %s: %v", port, theLab.BackendNS(i), err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// listenPacketIn opens a UDP socket on port in the namespace of lab backend i; the caller closes it.
func listenPacketIn(t *testing.T, i, port int) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := theLab.Do(theLab.BackendNS(i), func() (err error) {
		pc, err = net.ListenPacket("udp", ":"+strconv.Itoa(port))
		return err
	}); err != nil {
		t.Fatalf("listen on udp port %d in %s: %v", port, theLab.BackendNS(i), err)
	}
	return pc
}

// serveConns accepts connections until ln closes, each handled by handle in a goroutine of its own.
func serveConns(t *testing.T, ln net.Listener, handle func(net.Conn)) {
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(responderDeadline))
				handle(c)
			})
		}
	})
}

// smtpResponder greets with its banner (220 or, when refusing, 554 and a close), answers HELO
// with 250 and QUIT with 221.
type smtpResponder struct{ refuse atomic.Bool }

func startSMTP(t *testing.T, i, port int) *smtpResponder {
	s := &smtpResponder{}
	name := "b" + strconv.Itoa(i)
	serveConns(t, listenIn(t, i, port), func(c net.Conn) {
		if s.refuse.Load() {
			io.WriteString(c, "554 "+name+" no SMTP service here\r\n")
			return
		}
		io.WriteString(c, "220 "+name+" ESMTP e2e\r\n")
		lines := bufio.NewScanner(io.LimitReader(c, 4096))
		for lines.Scan() {
			switch verb, _, _ := strings.Cut(strings.ToUpper(lines.Text()), " "); verb {
			case "HELO", "EHLO":
				io.WriteString(c, "250 "+name+"\r\n")
			case "QUIT":
				io.WriteString(c, "221 bye\r\n")
				return
			default:
				io.WriteString(c, "500 unknown command\r\n")
			}
		}
	})
	return s
}

// dnsResponder answers every query, over UDP and TCP on one port, with an A record (192.0.2.53)
// and NOERROR, or with SERVFAIL and no record while failing.
type dnsResponder struct{ servfail atomic.Bool }

// dnsAnswerA is the address the responder's answers hold.
var dnsAnswerA = [4]byte{192, 0, 2, 53}

func startDNS(t *testing.T, i, port int) *dnsResponder {
	r := &dnsResponder{}
	serveConns(t, listenIn(t, i, port), func(c net.Conn) {
		var length [2]byte
		if _, err := io.ReadFull(c, length[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(length[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		if answer, err := r.answer(query); err == nil {
			c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(answer))), answer...))
		}
	})
	pc := listenPacketIn(t, i, port)
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if answer, err := r.answer(buf[:n]); err == nil {
				pc.WriteTo(answer, from)
			}
		}
	})
	return r
}

// answer is the response to one query.
func (r *dnsResponder) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	rcode := dnsmessage.RCodeSuccess
	if r.servfail.Load() {
		rcode = dnsmessage.RCodeServerFailure
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if rcode == dnsmessage.RCodeSuccess {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
		if err := b.AResource(rh, dnsmessage.AResource{A: dnsAnswerA}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// startHTTPS serves body() on every path over TLS (a self-signed certificate) on port.
func startHTTPS(t *testing.T, i, port int, body func() string) {
	t.Helper()
	cert := selfSigned(t)
	ln := tls.NewListener(listenIn(t, i, port), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body()) }),
		ReadHeaderTimeout: responderDeadline,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			t.Errorf("https responder: %v", err)
		}
	}()
	t.Cleanup(func() { srv.Close(); <-done })
}

// selfSigned is a fresh ECDSA certificate for the https responder (the check skips verifying it).
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sluice-e2e-checks"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// silentUDP is a UDP socket that reads and never answers: the port is open, so no ICMP port
// unreachable comes back. close and open flip it.
type silentUDP struct {
	t    *testing.T
	i    int
	port int
	pc   net.PacketConn
	wg   sync.WaitGroup
}

func startSilentUDP(t *testing.T, i, port int) *silentUDP {
	s := &silentUDP{t: t, i: i, port: port}
	s.open()
	t.Cleanup(s.close)
	return s
}

// open binds the port and drains it.
func (s *silentUDP) open() {
	s.pc = listenPacketIn(s.t, s.i, s.port)
	pc := s.pc
	s.wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	})
}

// close unbinds the port: datagrams to it now get an ICMP port unreachable.
func (s *silentUDP) close() {
	if s.pc != nil {
		s.pc.Close()
		s.wg.Wait()
		s.pc = nil
	}
}
