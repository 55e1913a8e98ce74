package health

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sluicelb/sluice/internal/config"
)

// maxDNSMessage is the largest DNS message read, over UDP or TCP (its length is 16 bits).
const maxDNSMessage = 1<<16 - 1

// dnsTypes are the record types a dns check asks for, by their config names.
var dnsTypes = map[config.DNSQueryType]dnsmessage.Type{
	config.QueryA: dnsmessage.TypeA, config.QueryAAAA: dnsmessage.TypeAAAA,
	config.QueryCNAME: dnsmessage.TypeCNAME, config.QueryMX: dnsmessage.TypeMX,
	config.QueryNS: dnsmessage.TypeNS, config.QueryPTR: dnsmessage.TypePTR,
	config.QuerySOA: dnsmessage.TypeSOA, config.QuerySRV: dnsmessage.TypeSRV,
	config.QueryTXT: dnsmessage.TypeTXT,
}

// dnsChecker sends one query and passes on an answer with rcode NOERROR that holds a record
// (keepalived's DNS_CHECK); NXDOMAIN, SERVFAIL or an empty answer is down.
type dnsChecker struct {
	question dnsmessage.Question
	network  string // udp or tcp
}

func newDNSChecker(hc *config.HealthCheck) (*dnsChecker, error) {
	text := cmpOr(hc.QueryName, config.DefaultQueryName)
	if !strings.HasSuffix(text, ".") {
		text += "."
	}
	name, err := dnsmessage.NewName(text)
	if err != nil {
		return nil, fmt.Errorf("dns health check query_name %q: %w", hc.QueryName, err)
	}
	qtype, ok := dnsTypes[cmpOr(hc.QueryType, config.DefaultDNSQueryType)]
	if !ok {
		return nil, fmt.Errorf("dns health check query_type %q is not one of %v", hc.QueryType, config.DNSQueryTypes)
	}
	c := &dnsChecker{
		question: dnsmessage.Question{Name: name, Type: qtype, Class: dnsmessage.ClassINET},
		network:  string(cmpOr(hc.QueryProtocol, config.DefaultDNSTransport)),
	}
	if _, err := c.query(0); err != nil { // a label longer than 63 shows only here
		return nil, fmt.Errorf("dns health check query_name %q: %w", hc.QueryName, err)
	}
	return c, nil
}

// cmpOr is v, or def when v is empty.
func cmpOr[T ~string](v, def T) T {
	if v == "" {
		return def
	}
	return v
}

func (c *dnsChecker) Check(ctx context.Context, target netip.AddrPort) Result {
	start := time.Now()
	id := uint16(rand.Uint32())
	query, err := c.query(id)
	if err != nil {
		return failed(start, err.Error())
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, c.network, target.String())
	if err != nil {
		return networkFailure(ctx, start, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	exchange := exchangeUDP
	if c.network == string(config.DNSOverTCP) {
		exchange = exchangeTCP
	}
	answer, err := exchange(conn, query, id)
	if err != nil {
		return networkFailure(ctx, start, err)
	}
	if reason := judgeAnswer(answer); reason != "" {
		return failed(start, reason)
	}
	return passed(start, "NOERROR with an answer")
}

// query is the wire form of the check's question under id, recursion desired.
func (c *dnsChecker) query(id uint16) ([]byte, error) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(c.question); err != nil {
		return nil, err
	}
	return b.Finish()
}

// exchangeUDP sends query and returns the first response with its id; others are skipped.
func exchangeUDP(conn net.Conn, query []byte, id uint16) ([]byte, error) {
	if _, err := conn.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, maxDNSMessage)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		var h dnsmessage.Parser
		if header, err := h.Start(buf[:n]); err == nil && header.Response && header.ID == id {
			return buf[:n], nil
		}
	}
}

// exchangeTCP sends query with its length in front and reads one response the same way.
func exchangeTCP(conn net.Conn, query []byte, id uint16) ([]byte, error) {
	framed := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
	if _, err := conn.Write(append(framed, query...)); err != nil {
		return nil, err
	}
	var length [2]byte
	if _, err := io.ReadFull(conn, length[:]); err != nil {
		return nil, err
	}
	answer := make([]byte, binary.BigEndian.Uint16(length[:]))
	if _, err := io.ReadFull(conn, answer); err != nil {
		return nil, err
	}
	var p dnsmessage.Parser
	if header, err := p.Start(answer); err == nil && (!header.Response || header.ID != id) {
		return nil, errors.New("the answer is not to the query sent")
	}
	return answer, nil
}

// rcodeNames are the mnemonics of the rcodes a server answers with (RFC 1035, 2136).
var rcodeNames = map[dnsmessage.RCode]string{
	dnsmessage.RCodeFormatError: "FORMERR", dnsmessage.RCodeServerFailure: "SERVFAIL",
	dnsmessage.RCodeNameError: "NXDOMAIN", dnsmessage.RCodeNotImplemented: "NOTIMP",
	dnsmessage.RCodeRefused: "REFUSED",
}

// rcodeText is an rcode's mnemonic, or its number.
func rcodeText(code dnsmessage.RCode) string {
	if name, ok := rcodeNames[code]; ok {
		return name
	}
	return fmt.Sprint(uint16(code))
}

// judgeAnswer says what is wrong with a response: an rcode other than NOERROR, no record in the
// answer section (a truncated one counts as holding one), or no DNS message; "" when nothing is.
func judgeAnswer(answer []byte) string {
	var p dnsmessage.Parser
	header, err := p.Start(answer)
	if err != nil {
		return "not a DNS answer: " + err.Error()
	}
	if header.RCode != dnsmessage.RCodeSuccess {
		return "rcode " + rcodeText(header.RCode)
	}
	if header.Truncated {
		return ""
	}
	if err := p.SkipAllQuestions(); err != nil {
		return "not a DNS answer: " + err.Error()
	}
	if _, err := p.AnswerHeader(); errors.Is(err, dnsmessage.ErrSectionDone) {
		return "NOERROR without an answer"
	} else if err != nil {
		return "not a DNS answer: " + err.Error()
	}
	return ""
}
