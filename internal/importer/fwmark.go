package importer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
)

// Limits on a --fwmark-rules file, beside boundedread.ImportBytes and MaxLineBytes.
const (
	// MaxFwmarkLines bounds the lines of a --fwmark-rules file.
	MaxFwmarkLines = 1 << 20
	// MaxFwmarkEntries bounds what the rules that set marks expand to, over the file: each
	// rule counts its addresses times its protocols times its port entries.
	MaxFwmarkEntries = 65536
)

// markRules are the rules of one --fwmark-rules file (iptables-save or nft list ruleset
// output) that set firewall marks: what each IPVS fwmark service stands for.
type markRules struct {
	file   string
	byMark map[uint32][]markRule
	// refused is, per mark, the first rule setting it that the reader does not understand.
	refused map[uint32]*Error
	// unread is the first rule that sets a mark the reader cannot tell (nil for none): it may
	// set any mark, so no fwmark service converts.
	unread *Error
	// entries counts the expansion of the rules read, within MaxFwmarkEntries.
	entries int
}

// markRule is what one rule that sets a mark matches.
type markRule struct {
	line   int
	vips   []netip.Addr
	protos []config.Protocol
	ports  config.PortList // nil: every port
}

// markAdvice is what a refusal of a rule tells the operator to write instead.
const markAdvice = "write the mark's rules as -d VIP -p tcp|udp -m multiport --dports P,Q -j MARK --set-mark N (nft: ip daddr VIP tcp dport { P, Q } meta mark set N), or the Sluice service with ports: by hand"

// readMarkRules reads the rules that set marks from path; nil for "" (no --fwmark-rules). The
// error is the file's: unreadable, or over the limits.
func readMarkRules(path string) (*markRules, error) {
	if path == "" {
		return nil, nil
	}
	data, err := boundedread.File(path, boundedread.ImportBytes)
	if err != nil {
		return nil, fmt.Errorf("--fwmark-rules: %w", err)
	}
	m := &markRules{file: path, byMark: map[uint32][]markRule{}, refused: map[uint32]*Error{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxLineBytes+1)
	n := 1
	for ; sc.Scan(); n++ {
		if n > MaxFwmarkLines {
			return nil, &Error{path, n, fmt.Sprintf("more than %d lines, the most an import reads from --fwmark-rules: keep the rules that set marks (iptables-save -t mangle, nft list table ...)", MaxFwmarkLines)}
		}
		if strings.IndexByte(sc.Text(), 0) >= 0 {
			return nil, &Error{path, n, "a NUL byte: not iptables-save or nft list ruleset output"}
		}
		if err := m.line(sc.Text(), n); err != nil {
			return nil, err
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return nil, &Error{path, n, fmt.Sprintf("a line longer than %s: not iptables-save or nft list ruleset output", boundedread.Size(MaxLineBytes))}
	}
	return m, nil
}

// line reads line n: an iptables-save -A rule or an nft rule that sets a mark; other lines
// (tables, chains, rules with other targets) are skipped. The error is MaxFwmarkEntries.
func (m *markRules) line(text string, n int) error {
	var r ruleReader
	if strings.HasPrefix(text, "-A ") {
		words, err := iptablesWords(text)
		if err != nil {
			if strings.Contains(text, "MARK") {
				m.setUnread(n, err.Error())
			}
			return nil
		}
		if len(words) < 2 || !r.iptables(words[2:]) {
			return nil
		}
	} else {
		words, err := nftWords(text)
		if err != nil || nftMarkSet(words) < 0 {
			if err != nil && strings.Contains(text, "mark set") {
				m.setUnread(n, err.Error())
			}
			return nil
		}
		r.nft(words)
	}
	return m.add(&r, n)
}

// setUnread records the first rule whose mark cannot be read.
func (m *markRules) setUnread(n int, why string) {
	if m.unread == nil {
		m.unread = &Error{m.file, n, why}
	}
}

// add keeps the rule read at line n, or what was not understood in it.
func (m *markRules) add(r *ruleReader, n int) error {
	if !r.markRead {
		m.setUnread(n, r.problem)
		return nil
	}
	r.finish()
	if r.problem != "" {
		if m.refused[r.mark] == nil {
			m.refused[r.mark] = &Error{m.file, n, r.problem}
		}
		return nil
	}
	if m.entries += len(r.rule.vips) * len(r.rule.protos) * max(1, len(r.rule.ports)); m.entries > MaxFwmarkEntries {
		return &Error{m.file, n, fmt.Sprintf("the rules that set marks name more than %d addresses, protocols and ports in all, the most an import expands: keep the rules of the fwmark services", MaxFwmarkEntries)}
	}
	r.rule.line = n
	m.byMark[r.mark] = append(m.byMark[r.mark], r.rule)
	return nil
}

// parseMark parses a firewall mark as keepalived and ipvsadm write it: a number from 1.
func parseMark(text string) (uint32, error) {
	n, err := strconv.ParseUint(text, 0, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s is not a firewall mark from 1 to 4294967295", shown(text))
	}
	return uint32(n), nil
}

// listeners are the services the fwmark service of mark text stands for: one per VIP and
// protocol its rules name, with their ports. The error is the refusal's reason.
func (m *markRules) listeners(text string) ([]listener, error) {
	mark, err := parseMark(text)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("no --fwmark-rules: Sluice matches a VIP and ports, not a firewall mark: pass --fwmark-rules FILE: the iptables-save or nft list ruleset output that sets mark %d", mark)
	}
	if e := m.refused[mark]; e != nil {
		return nil, e
	}
	if m.unread != nil {
		return nil, &Error{m.unread.File, m.unread.Line, fmt.Sprintf("which mark this rule sets is not clear (%s): it may be mark %d: set marks by value (-j MARK --set-mark N, meta mark set N) or leave the rule out of the file", m.unread.Msg, mark)}
	}
	rules := m.byMark[mark]
	if len(rules) == 0 {
		return nil, fmt.Errorf("no rule of %s sets mark %d (iptables: -j MARK --set-mark %d; nft: meta mark set %d): pass the rules IPVS's traffic goes through", m.file, mark, mark, mark)
	}
	type key struct {
		vip   netip.Addr
		proto config.Protocol
	}
	var out []listener
	index := map[key]int{}
	for _, r := range rules {
		ports := r.ports
		if ports == nil {
			ports = config.PortList{{First: 1, Last: 65535}}
		}
		for _, vip := range r.vips {
			for _, proto := range r.protos {
				i, ok := index[key{vip, proto}]
				if !ok {
					i, index[key{vip, proto}] = len(out), len(out)
					out = append(out, listener{vip: vip, proto: proto, at: pos{m.file, r.line}, fwmark: mark})
				}
				out[i].ports = append(out[i].ports, ports...)
			}
		}
	}
	for i := range out {
		out[i].ports = out[i].ports.Canonical()
	}
	return out, nil
}

// fwmarkNote says which mark and rule a service's VIP, protocol and ports come from.
func fwmarkNote(l listener) string {
	return fmt.Sprintf("%s %s port %s: fwmark %d, set at %s:%d.", l.proto, l.vip, l.ports, l.fwmark, l.at.file, l.at.line)
}

// sharedMarkNote says that the n services of one mark no longer share persistence.
func sharedMarkNote(mark uint32, n int) string {
	return fmt.Sprintf("fwmark %d stands for %d services (VIPs or protocols): IPVS shared one backend set and persistence across them; Sluice keeps persistence per service.", mark, n)
}

// rulesSource is what the header of an import names of the --fwmark-rules, "" for none.
func (o Options) rulesSource() string {
	if o.FwmarkRules == "" {
		return ""
	}
	return " with the marks of " + o.FwmarkRules
}

// ruleReader reads one rule that sets a mark.
type ruleReader struct {
	rule     markRule
	mark     uint32
	markRead bool
	// problem is the first thing of the rule not understood, "" when none.
	problem string
}

// refuse records what is not understood, keeping the first.
func (r *ruleReader) refuse(format string, args ...any) {
	if r.problem == "" {
		r.problem = fmt.Sprintf(format, args...)
	}
}

// setMark reads the value of a mark set; masked tells that it sets only some bits.
func (r *ruleReader) setMark(value string, masked bool) {
	v, mask, hasMask := strings.Cut(value, "/")
	mark, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		r.refuse("the mark it sets, %s, is not a number", shown(value))
		return
	}
	r.mark, r.markRead = uint32(mark), true
	if hasMask {
		if full, err := strconv.ParseUint(mask, 0, 32); err != nil || full != 0xffffffff {
			masked = true
		}
	}
	if masked {
		r.refuse("it sets mark %d with a mask or an operator, keeping bits of the packet's mark: set the whole mark (--set-mark %d, meta mark set %d)", mark, mark, mark)
	}
}

// addVIPs takes the destination addresses of a rule: single addresses, /32 and /128 prefixes.
func (r *ruleReader) addVIPs(values []string) {
	if r.rule.vips != nil {
		r.refuse("two destination address matches: %s", markAdvice)
		return
	}
	for _, v := range values {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			p = netip.Prefix{}
			if a, aerr := parseAddr(v); aerr == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if !p.IsValid() || !p.IsSingleIP() {
			r.refuse("destination %s is not one address (a VIP): list each VIP, as -d VIP or ip daddr { VIP, VIP }", shown(v))
			return
		}
		r.rule.vips = append(r.rule.vips, p.Addr().Unmap())
	}
}

// addProtos takes the protocols a rule matches, intersected with those it matched before.
func (r *ruleReader) addProtos(values []string) {
	var protos []config.Protocol
	for _, v := range values {
		switch strings.ToLower(v) {
		case "tcp", "6":
			protos = append(protos, config.ProtocolTCP)
		case "udp", "17":
			protos = append(protos, config.ProtocolUDP)
		default:
			r.refuse("protocol %s: Sluice balances tcp and udp", shown(v))
			return
		}
	}
	if r.rule.protos != nil {
		protos = slices.DeleteFunc(protos, func(p config.Protocol) bool { return !slices.Contains(r.rule.protos, p) })
		if len(protos) == 0 {
			r.refuse("its protocol matches contradict each other: it marks no tcp or udp packet")
			return
		}
	}
	r.rule.protos = protos
}

// addPorts takes the destination ports of a rule: ports and ranges, first and last joined by
// sep (":" for iptables, "-" for nft).
func (r *ruleReader) addPorts(values []string, sep string) {
	if r.rule.ports != nil {
		r.refuse("two destination port matches: %s", markAdvice)
		return
	}
	for _, v := range values {
		first, last, isRange := strings.Cut(v, sep)
		if !isRange {
			last = first
		}
		a, err := parsePort(first)
		b, berr := parsePort(last)
		switch {
		case err != nil || berr != nil:
			r.refuse("destination port %s is not a port or a range (run iptables-save or nft -n list ruleset: ports as numbers)", shown(v))
			return
		case isRange && a == 0:
			a = 1 // 0:1023 is every port to 1023
		}
		if a == 0 || a > b {
			r.refuse("destination port %s is not a port from 1 to 65535 or a range first%slast", shown(v), sep)
			return
		}
		r.rule.ports = append(r.rule.ports, config.Range{First: a, Last: b})
	}
}

// finish checks that the rule names its VIPs; a rule without a protocol takes tcp and udp.
func (r *ruleReader) finish() {
	if len(r.rule.vips) == 0 {
		r.refuse("it matches no destination address: Sluice's services listen on a VIP: add -d VIP (nft: ip daddr VIP) to the rule")
	}
	if r.rule.protos == nil {
		r.rule.protos = []config.Protocol{config.ProtocolTCP, config.ProtocolUDP}
	}
}

// iptables reads the words of an iptables-save rule after -A CHAIN; false when it does not
// set a mark (-j MARK).
func (r *ruleReader) iptables(words []string) bool {
	target := slices.IndexFunc(words, func(w string) bool { return w == "-j" || w == "--jump" })
	if target < 0 || target+1 == len(words) || words[target+1] != "MARK" {
		return false
	}
	r.iptablesTarget(words[target+2:])
	r.iptablesMatches(words[:target])
	return true
}

// iptablesTarget reads the options of -j MARK: --set-mark or --set-xmark, with a full mask.
func (r *ruleReader) iptablesTarget(words []string) {
	if len(words) != 2 {
		r.refuse("-j MARK takes --set-mark N or --set-xmark N/0xffffffff here")
		return
	}
	switch words[0] {
	case "--set-mark", "--set-xmark":
		r.setMark(words[1], false)
	case "--and-mark", "--or-mark", "--xor-mark":
		r.setMark(words[1], true)
	default:
		r.refuse("-j MARK %s is not understood: %s", shown(words[0]), markAdvice)
	}
}

// iptablesMatches reads the matches of a rule that sets a mark.
func (r *ruleReader) iptablesMatches(words []string) {
	for i := 0; i < len(words); i++ {
		w := words[i]
		value := ""
		if i+1 < len(words) {
			value = words[i+1]
		}
		switch w {
		case "!":
			r.refuse("a negation (! %s): Sluice matches what a service names, not what it does not: %s", shown(value), markAdvice)
		case "-d", "--destination":
			r.addVIPs(strings.Split(value, ","))
		case "-p", "--protocol":
			r.addProtos([]string{value})
		case "-m", "--match":
			r.iptablesModule(value)
		case "--dport", "--destination-port":
			r.addPorts([]string{value}, ":")
		case "--dports", "--destination-ports":
			r.addPorts(strings.Split(value, ","), ":")
		case "--comment":
		case "-i", "--in-interface", "-o", "--out-interface":
			r.refuse("%s %s (an interface): Sluice matches the VIP on every interface: drop it from the rule, or write the service by hand", w, shown(value))
		case "-s", "--source", "--sport", "--source-port", "--sports", "--source-ports", "--ports":
			r.refuse("%s (source addresses or ports): Sluice's services match the destination: %s", w, markAdvice)
		case "--match-set":
			r.refuse("--match-set %s (an ipset): list the set's VIPs and ports in the rules instead", shown(value))
		default:
			r.refuse("%s is not understood: %s", shown(w), markAdvice)
			return
		}
		i++ // the value
	}
}

// iptablesModule reads an -m: the modules of protocol and port matches and comments.
func (r *ruleReader) iptablesModule(name string) {
	switch name {
	case "tcp", "udp", "multiport", "comment":
	case "set":
		r.refuse("-m set (an ipset): list the set's VIPs and ports in the rules instead")
	default:
		r.refuse("-m %s is not understood: %s", shown(name), markAdvice)
	}
}

// iptablesWords splits an iptables-save line into words: blanks separate them, and a
// "quoted comment" (with \" inside) is one word.
func iptablesWords(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			word.WriteByte(line[i])
		case c == '"':
			quoted, inWord = !quoted, true
		case !quoted && (c == ' ' || c == '\t' || c == '\r'):
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, errors.New("an unterminated quote")
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// nftWords splits an nft list ruleset line into words: blanks separate them, { } and , are
// words of their own, "quoted text" is one word, and # starts a comment (nft -a's handles).
func nftWords(line string) ([]string, error) {
	var words []string
	start := -1
	flush := func(end int) {
		if start >= 0 {
			words = append(words, line[start:end])
			start = -1
		}
	}
	for i := 0; i < len(line); i++ {
		switch c := line[i]; c {
		case '#':
			flush(i)
			return words, nil
		case ' ', '\t', '\r':
			flush(i)
		case '{', '}', ',':
			flush(i)
			words = append(words, line[i:i+1])
		case '"':
			flush(i)
			end := strings.IndexByte(line[i+1:], '"')
			if end < 0 {
				return nil, errors.New("an unterminated quote")
			}
			words = append(words, line[i:i+end+2])
			i += end + 1
		default:
			if start < 0 {
				start = i
			}
		}
	}
	flush(len(line))
	return words, nil
}

// nftMarkSet is the index of "mark set" in nft words that set the packet's mark (meta mark
// set, mark set; not the conntrack entry's, ct mark set), -1 when they do not.
func nftMarkSet(words []string) int {
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "mark" && words[i+1] == "set" && (i == 0 || words[i-1] != "ct") {
			return i
		}
	}
	return -1
}

// nftOperators are the words that combine a mark set's value with the packet's bits.
var nftOperators = []string{"|", "&", "^", "and", "or", "xor", "<<", ">>"}

// nft reads the words of an nft rule that sets a mark: the mark first, so that what is not
// understood in the rule refuses that mark's services.
func (r *ruleReader) nft(words []string) {
	r.nftMarkValue(words, nftMarkSet(words)+2)
	for i := 0; i < len(words) && r.problem == ""; {
		i = r.nftStatement(words, i)
	}
}

// nftStatement reads the match or statement at words[i] and returns the index after it.
func (r *ruleReader) nftStatement(words []string, i int) int {
	w, next := words[i], ""
	if i+1 < len(words) {
		next = words[i+1]
	}
	switch {
	case (w == "ip" || w == "ip6") && next == "daddr":
		values, end := r.nftValues(words, i+2)
		r.addVIPs(values)
		return end
	case w == "ip" && next == "protocol", w == "ip6" && next == "nexthdr", w == "meta" && next == "l4proto":
		values, end := r.nftValues(words, i+2)
		r.addProtos(values)
		return end
	case (w == "tcp" || w == "udp") && next == "dport":
		r.addProtos([]string{w})
		fallthrough
	case w == "th" && next == "dport":
		values, end := r.nftValues(words, i+2)
		r.addPorts(values, "-")
		return end
	case w == "meta" && next == "mark":
		return r.nftStatement(words, i+1)
	case w == "mark" && next == "set":
		return i + 3 // read first, by nftMarkValue
	case w == "meta" && next == "nfproto":
		_, end := r.nftValues(words, i+2)
		return end
	case w == "counter":
		if next == "packets" && i+4 < len(words) && words[i+3] == "bytes" {
			return i + 5
		}
		return i + 1
	case w == "comment":
		return i + 2
	case w == "accept" || w == "continue" || w == "return":
		return i + 1
	case w == "iifname" || w == "oifname" || w == "iif" || w == "oif" || next == "iifname" || next == "oifname" || next == "iif" || next == "oif":
		r.refuse("%s (an interface): Sluice matches the VIP on every interface: drop it from the rule, or write the service by hand", shown(w+" "+next))
	case next == "saddr" || next == "sport":
		r.refuse("%s (source addresses or ports): Sluice's services match the destination: %s", shown(w+" "+next), markAdvice)
	default:
		r.refuse("%s is not understood: %s", shown(w), markAdvice)
	}
	return len(words)
}

// nftMarkValue reads the value of a mark set at words[i].
func (r *ruleReader) nftMarkValue(words []string, i int) {
	switch {
	case i == len(words):
		r.refuse("mark set without a value")
	case strings.ContainsAny(words[i], "/"):
		r.refuse("the mark it sets, %s, is not a number (a map or an expression)", shown(words[i]))
	default:
		r.setMark(words[i], i+1 < len(words) && slices.Contains(nftOperators, words[i+1]))
	}
}

// nftValues reads the value at words[i]: a word, or an anonymous set { a, b }; a named set
// (@name) and != are refused.
func (r *ruleReader) nftValues(words []string, i int) ([]string, int) {
	if i < len(words) && words[i] == "==" {
		i++
	}
	switch {
	case i == len(words):
		r.refuse("a match without a value")
		return nil, i
	case words[i] == "!=":
		r.refuse("a negation (!=): Sluice matches what a service names, not what it does not: %s", markAdvice)
		return nil, len(words)
	case strings.HasPrefix(words[i], "@"):
		r.refuse("the named set %s: list its VIPs and ports in the rule ({ a, b }) instead", shown(words[i]))
		return nil, len(words)
	case words[i] != "{":
		return []string{words[i]}, i + 1
	}
	var values []string
	for i++; i < len(words); i++ {
		switch words[i] {
		case "}":
			return values, i + 1
		case ",":
		default:
			values = append(values, words[i])
		}
	}
	r.refuse("a set { without its }: %s", markAdvice)
	return nil, i
}
