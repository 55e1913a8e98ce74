package health

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sluicelb/sluice/internal/config"
)

// dnsZone is what the test DNS responder knows: names with an A record, names that fail with
// SERVFAIL, and names that exist without records (NOERROR, empty answer); other names are
// NXDOMAIN.
var dnsZone = struct{ records, servfail, empty string }{"www.example.", "broken.example.", "empty.example."}

// dnsAnswer answers query as the test zone says; nil for what is not a query.
func dnsAnswer(query []byte) []byte {
	var p dnsmessage.Parser
	header, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	reply := dnsmessage.Header{ID: header.ID, Response: true, Authoritative: true, RecursionDesired: header.RecursionDesired}
	var answers []dnsmessage.Resource
	switch q.Name.String() {
	case dnsZone.records:
		answers = append(answers, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
			Body:   &dnsmessage.AResource{A: [4]byte{192, 0, 2, 80}},
		})
	case dnsZone.servfail:
		reply.RCode = dnsmessage.RCodeServerFailure
	case dnsZone.empty:
	default:
		reply.RCode = dnsmessage.RCodeNameError
	}
	msg := dnsmessage.Message{Header: reply, Questions: []dnsmessage.Question{q}, Answers: answers}
	out, err := msg.Pack()
	if err != nil {
		return nil
	}
	return out
}

// serveDNS runs the test zone on loopback over UDP and TCP, on the same port.
func serveDNS(t *testing.T, loopback netip.Addr) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(loopback, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(l.Addr().String())
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed by the cleanup
			}
			if answer := dnsAnswer(buf[:n]); answer != nil {
				udp.WriteToUDPAddrPort(answer, from)
			}
		}
	})
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serveDNSConn(conn) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		udp.Close()
		wg.Wait()
	})
	return addr
}

// serveDNSConn answers one length-prefixed query on a TCP connection.
func serveDNSConn(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(probeTimeout))
	var length [2]byte
	if _, err := io.ReadFull(conn, length[:]); err != nil {
		return
	}
	query := make([]byte, binary.BigEndian.Uint16(length[:]))
	if _, err := io.ReadFull(conn, query); err != nil {
		return
	}
	answer := dnsAnswer(query)
	conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(answer))), answer...))
}

func TestDNS(t *testing.T) {
	forEachLoopback(t, func(t *testing.T, loopback netip.Addr) {
		server := serveDNS(t, loopback)
		silent := serveUDP(t, loopback, func([]byte) []byte { return nil })
		for _, transport := range config.DNSTransports {
			t.Run(string(transport), func(t *testing.T) {
				for _, tc := range []struct {
					name, query string
					ok          bool
					want        string
				}{
					{"answer", "www.example", true, "NOERROR with an answer"},
					{"answer, final dot", "www.example.", true, "NOERROR with an answer"},
					{"SERVFAIL", "broken.example", false, "rcode SERVFAIL"},
					{"NXDOMAIN", "missing.example", false, "rcode NXDOMAIN"},
					{"no record", "empty.example", false, "NOERROR without an answer"},
				} {
					t.Run(tc.name, func(t *testing.T) {
						hc := config.HealthCheck{Type: config.CheckDNS, QueryName: tc.query, QueryType: config.QueryA, QueryProtocol: transport}
						wantResult(t, check(t, hc, server, probeTimeout), tc.ok, tc.want)
					})
				}
			})
		}
		t.Run("no answer", func(t *testing.T) {
			hc := config.HealthCheck{Type: config.CheckDNS, QueryName: "www.example"}
			wantResult(t, check(t, hc, silent, 50*time.Millisecond), false, "timed out after 50ms")
		})
		t.Run("closed tcp port", func(t *testing.T) {
			hc := config.HealthCheck{Type: config.CheckDNS, QueryName: "www.example", QueryProtocol: config.DNSOverTCP}
			wantResult(t, check(t, hc, closedPort(t, "tcp", loopback), probeTimeout), false, "connection refused")
		})
	})
}
