package config

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// field is one key a YAML mapping may hold: its name, the Go type its value decodes into, and
// the struct type that holds it (an inline struct's own).
type field struct {
	name  string
	typ   reflect.Type
	owner reflect.Type
}

// fieldsOf lists the keys of a mapping decoded into the struct type t, those of inline structs
// (bgp.peers[] path attributes) in place; once per type (a config of 10,000 services asks 30,000
// times), the list shared and read-only.
func fieldsOf(t reflect.Type) []field {
	if known, ok := fieldsByType.Load(t); ok {
		return known.([]field)
	}
	out := listFields(t)
	fieldsByType.Store(t, out)
	return out
}

// fieldsByType holds fieldsOf's lists.
var fieldsByType sync.Map

// listFields is fieldsOf, not kept.
func listFields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case !f.IsExported() || name == "-":
		case slices.Contains(strings.Split(opts, ","), "inline"):
			out = append(out, fieldsOf(f.Type)...)
		default:
			out = append(out, field{cmp.Or(name, strings.ToLower(f.Name)), f.Type, t})
		}
	}
	return out
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// isScalar tells whether values of t are written as one YAML scalar (Range decodes itself from
// one); once per type, as fieldsOf.
func isScalar(t reflect.Type) bool {
	if known, ok := scalarTypes.Load(t); ok {
		return known.(bool)
	}
	scalar := reflect.PointerTo(t).Implements(unmarshalerType) || t.Kind() != reflect.Struct && t.Kind() != reflect.Slice
	scalarTypes.Store(t, scalar)
	return scalar
}

// scalarTypes holds isScalar's answers.
var scalarTypes sync.Map

// shapeChecker walks a YAML document against the model and reports what decoding could not take
// as written: unknown keys, keys given twice, and values of the wrong type, each with its path.
type shapeChecker struct {
	errs Errors
	// broken are the paths whose value did not decode: validating them would only repeat it.
	broken []string
	// decoded says the whole document decoded into a Config without an error: each scalar of a
	// known key then decoded into its type, and is not decoded again (10,000 services hold
	// 100,000 scalars).
	decoded bool
}

// checkShape reports every unknown key, repeated key and value of the wrong type of the
// document; decoded says it decoded into a Config without an error.
func checkShape(doc *yaml.Node, decoded bool) shapeChecker {
	c := shapeChecker{decoded: decoded}
	c.check(doc, reflect.TypeFor[Config](), "")
	return c
}

func (c *shapeChecker) fail(path string, line int, broken bool, format string, args ...any) {
	c.errs = append(c.errs, FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
	if broken {
		c.broken = append(c.broken, path)
	}
}

func (c *shapeChecker) check(n *yaml.Node, t reflect.Type, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
	}
	if n.ShortTag() == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case isScalar(t):
		if n.Kind != yaml.ScalarNode || isInteger(t) && n.ShortTag() != "!!int" || !c.decoded && n.Decode(reflect.New(t).Interface()) != nil {
			c.fail(path, n.Line, true, "expected %s, found %s", describeType(t), describeNode(n))
		} else if isInteger(t) && impliedOctal(n.Value) {
			c.fail(path, n.Line, true, "%q is octal to YAML (a leading 0): write it without the 0, or as 0o%s if octal is meant",
				n.Value, strings.TrimLeft(strings.TrimLeft(n.Value, "+-"), "0_"))
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.fail(path, n.Line, true, "expected a list, found %s", describeNode(n))
			return
		}
		for i, item := range n.Content {
			c.check(item, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
	default:
		if n.Kind != yaml.MappingNode {
			c.fail(path, n.Line, true, "expected a mapping, found %s", describeNode(n))
			return
		}
		c.mapping(n, t, path)
	}
}

// mapping checks the keys of a mapping decoded into the struct type t.
func (c *shapeChecker) mapping(n *yaml.Node, t reflect.Type, path string) {
	fields := fieldsOf(t)
	// seen holds the key of each field already given, by the field's index.
	var room [64]*yaml.Node
	seen := room[:]
	if len(fields) > len(room) {
		seen = make([]*yaml.Node, len(fields))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if key.ShortTag() == "!!merge" {
			c.merge(value, t, path)
			continue
		}
		at := key.Value
		if path != "" {
			at = path + "." + key.Value
		}
		j := slices.IndexFunc(fields, func(f field) bool { return f.name == key.Value })
		if j < 0 {
			c.fail(at, key.Line, false, "unknown field (%s)", suggest(key.Value, fields))
			continue
		}
		if first := seen[j]; first != nil {
			c.fail(at, key.Line, true, "already set at line %d: give a key once", first.Line)
			continue
		}
		seen[j] = key
		c.check(value, fields[j].typ, at)
	}
}

// merge checks the mappings a merge key (<<: *defaults) brings into a mapping of type t; the
// mapping's own keys override theirs. Their scalars are decoded here: the decoder skips those
// the mapping overrides.
func (c *shapeChecker) merge(n *yaml.Node, t reflect.Type, path string) {
	decoded := c.decoded
	c.decoded = false
	defer func() { c.decoded = decoded }()
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		c.mapping(n, t, path)
	case yaml.SequenceNode:
		for _, m := range n.Content {
			c.merge(m, t, path)
		}
	}
}

// suggest names the allowed key closest to key, or lists them all when none is close.
func suggest(key string, fields []field) string {
	best, bestDist := "", len(key)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
		if d := editDistance(strings.ToLower(key), f.name); d < bestDist {
			best, bestDist = f.name, d
		}
	}
	if best != "" && (bestDist <= 2 || bestDist <= len(key)/3) {
		return "did you mean " + best + "?"
	}
	return "expected one of " + strings.Join(names, ", ")
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := range len(a) {
		cur := make([]int, len(b)+1)
		cur[0] = i + 1
		for j := range len(b) {
			cost := 1
			if a[i] == b[j] {
				cost = 0
			}
			cur[j+1] = min(prev[j+1]+1, cur[j]+1, prev[j]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// impliedOctal tells whether a YAML integer is written with a leading 0 (0443), which YAML
// reads as octal (291): a port or a weight written so is not what its writer meant.
func impliedOctal(text string) bool {
	digits := strings.TrimLeft(text, "+-")
	return len(digits) > 1 && digits[0] == '0' && digits[1] >= '0' && digits[1] <= '9'
}

func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// describeType says what a value of t is written as.
func describeType(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[Range]():
		return "a number or a range like 8000-8010"
	case t == reflect.TypeFor[Duration]():
		return "a duration like 2s"
	case isInteger(t) && t.Kind() >= reflect.Uint:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<t.Bits()-1)
	case isInteger(t):
		return "a whole number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	}
	return "a text value"
}

// describeNode says what a YAML node holds, for an error.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// covers tells whether path is one of paths or inside one of them.
func covers(paths []string, path string) bool {
	for _, p := range paths {
		if p == "" || path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}
