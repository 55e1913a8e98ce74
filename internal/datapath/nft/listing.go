package nft

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// A table is read with one `nft --json list table`: one snapshot of all its objects, however
// many sets it holds, decoded as nft streams it out.

// listedObject is one entry of nft's JSON listing; the kinds Sluice does not read back (the
// table itself, rules, metainfo) are skipped.
type listedObject struct {
	Chain   *struct{ Name string } `json:"chain"`
	Set     *listedSet             `json:"set"`
	Map     *listedSet             `json:"map"`
	Counter *struct {
		Name           string
		Packets, Bytes uint64
	} `json:"counter"`
}

// listedSet is a set or a map with its elements (keys, or [key, value] pairs), still undecoded.
type listedSet struct {
	Name string            `json:"name"`
	Elem []json.RawMessage `json:"elem"`
}

// errNoTable is returned by listTable when the table does not exist.
var errNoTable = errors.New("no such table")

// listTable reads Sluice's table of family f into st, or returns errNoTable.
func listTable(ctx context.Context, st *state, f knftables.Family) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops nft if decoding fails half way
	cmd := exec.CommandContext(ctx, "nft", "--json", "list", "table", string(f), TableName)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	decodeErr := decodeListing(out, func(o *listedObject) error { return st.addListed(f, o) })
	if decodeErr != nil {
		cancel()
	}
	_, _ = io.Copy(io.Discard, out) // the listing's end, so that nft is not cut off before it exits
	waitErr := cmd.Wait()
	if decodeErr == nil && waitErr != nil && strings.Contains(stderr.String(), "No such file or directory") {
		return errNoTable
	}
	if err := errors.Join(decodeErr, waitErr); err != nil {
		return fmt.Errorf("nft list table %s %s: %w: %s", f, TableName, err, strings.TrimSpace(stderr.String()))
	}
	st.tables[f] = true
	return nil
}

// decodeListing calls add for each object of a listing ({"nftables": [...]}) in turn.
func decodeListing(r io.Reader, add func(*listedObject) error) error {
	dec := json.NewDecoder(r)
	for _, want := range []json.Token{json.Delim('{'), "nftables", json.Delim('[')} {
		if tok, err := dec.Token(); err != nil || tok != want {
			if err == io.EOF {
				return nil // nothing listed: the table is missing, nft says why
			}
			return fmt.Errorf("nft listing: want %v, got %v (%v)", want, tok, err)
		}
	}
	for dec.More() {
		var o listedObject
		if err := dec.Decode(&o); err != nil {
			return fmt.Errorf("nft listing: %w", err)
		}
		if err := add(&o); err != nil {
			return err
		}
	}
	return nil
}

// addListed adds one listed object of family f to st. The elements of dynamic flow maps are
// left out: the packet path owns them, they are never reconciled.
func (s *state) addListed(f knftables.Family, o *listedObject) error {
	switch {
	case o.Chain != nil:
		s.chains[objKey{f, o.Chain.Name}] = &chainDef{chain: &knftables.Chain{Family: f, Table: TableName, Name: o.Chain.Name}}
	case o.Counter != nil:
		// By name, not handle: knftables writes "delete counter ... handle N" without its newline.
		c := o.Counter
		s.counters[objKey{f, c.Name}] = &knftables.Counter{Family: f, Table: TableName, Name: c.Name, Packets: ptr(c.Packets), Bytes: ptr(c.Bytes)}
	case o.Set != nil:
		return s.addListedSet(f, &knftables.Set{Name: o.Set.Name}, o.Set, false)
	case o.Map != nil:
		return s.addListedSet(f, &knftables.Map{Name: o.Map.Name}, o.Map, true)
	}
	return nil
}

func (s *state) addListedSet(f knftables.Family, obj knftables.Object, l *listedSet, isMap bool) error {
	def := s.addSet(f, obj)
	if strings.HasPrefix(l.Name, "flows-") {
		return nil
	}
	for _, raw := range l.Elem {
		e, err := listedElement(raw, isMap)
		if err != nil {
			return fmt.Errorf("%s %s: %w", f, l.Name, err)
		}
		def.add(e)
	}
	return nil
}

// listedElement decodes a listed element: a key, or a [key, value] pair for a map. A key with a
// comment is listed as {"elem": {"val": KEY, "comment": "..."}}.
func listedElement(raw json.RawMessage, isMap bool) (*knftables.Element, error) {
	var key, value any
	if isMap {
		var pair []any
		if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("map element %s is not a [key, value] pair", raw)
		}
		key, value = pair[0], pair[1]
	} else if err := json.Unmarshal(raw, &key); err != nil {
		return nil, err
	}
	e := &knftables.Element{}
	if wrapped, ok := field(key, "elem").(map[string]any); ok {
		key = wrapped["val"]
		if c, ok := wrapped["comment"].(string); ok {
			e.Comment = &c
		}
	}
	var err error
	if e.Key, err = listedValue(key); err != nil {
		return nil, err
	}
	if value != nil {
		e.Value, err = listedValue(value)
	}
	return e, err
}

// listedValue writes a listed key or value the way Sluice renders it: a string or number as is,
// a concatenation as its parts, a prefix as addr/len, a range as first-last and a verdict as
// "drop" or "goto chain".
func listedValue(v any) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case float64:
		return []string{strconv.FormatInt(int64(v), 10)}, nil
	case map[string]any:
		return listedObjectValue(v)
	}
	return nil, fmt.Errorf("cannot read element value %v", v)
}

// field is v's field name when v is a JSON object, else nil.
func field(v any, name string) any {
	if m, ok := v.(map[string]any); ok {
		return m[name]
	}
	return nil
}

func listedObjectValue(v map[string]any) ([]string, error) {
	if parts, ok := v["concat"].([]any); ok {
		var out []string
		for _, p := range parts {
			s, err := listedValue(p)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	}
	if p, ok := v["prefix"].(map[string]any); ok {
		addr, _ := p["addr"].(string)
		bits, _ := p["len"].(float64)
		return []string{addr + "/" + strconv.Itoa(int(bits))}, nil
	}
	if r, ok := v["range"].([]any); ok && len(r) == 2 {
		first, err1 := listedValue(r[0])
		last, err2 := listedValue(r[1])
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		return []string{first[0] + "-" + last[0]}, nil
	}
	for verdict, arg := range v { // a verdict: {"drop": null}, {"goto": {"target": "chain"}}
		if target, ok := field(arg, "target").(string); ok && len(v) == 1 {
			return []string{verdict + " " + target}, nil
		}
		if arg == nil && len(v) == 1 {
			return []string{verdict}, nil
		}
	}
	return nil, fmt.Errorf("cannot read element value %v", v)
}
