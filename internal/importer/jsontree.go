package importer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"

	"github.com/sluicelb/sluice/internal/jsonscan"
)

// MaxJSONValues bounds the values (objects, arrays, strings, numbers…) of one nftlb file:
// 131,072 backends of ten keys each take about 2.7 million.
const MaxJSONValues = 1 << 22

// jsonKind is what a JSON value is.
type jsonKind int

const (
	jsonScalar jsonKind = iota // a string, a number or a boolean
	jsonNull
	jsonObject
	jsonArray
)

// jsonNode is one value of a JSON file and the line it starts on.
type jsonNode struct {
	kind jsonKind
	// text is a string's value, a number as written, true or false.
	text string
	line int
	// keys are an object's keys, each once; items are its values (by keys) or an array's
	// elements.
	keys  []string
	items []*jsonNode
}

// get is the value of an object's key, nil when absent (or n is not an object).
func (n *jsonNode) get(key string) *jsonNode {
	if n.kind != jsonObject {
		return nil
	}
	for i, k := range n.keys {
		if k == key {
			return n.items[i]
		}
	}
	return nil
}

// what names a value's kind for an error.
func (n *jsonNode) what() string {
	switch n.kind {
	case jsonObject:
		return "an object"
	case jsonArray:
		return "an array"
	case jsonNull:
		return "null"
	case jsonScalar:
	}
	return "a string or a number"
}

// jsonReader reads a JSON file as nftlb (jansson) does: a key repeated in an object takes its
// last value, numbers and strings are both text; every value keeps its line.
type jsonReader struct {
	file string
	data []byte
	dec  *json.Decoder
	// line is the line at offset, counted as the decoder moves on.
	line   int
	offset int
	values int
	// warnings are the repeated keys, at their lines.
	warnings []string
}

// parseJSON reads the one JSON value data holds.
func parseJSON(file string, data []byte) (*jsonNode, []string, error) {
	r := &jsonReader{file: file, data: data, dec: json.NewDecoder(bytes.NewReader(data)), line: 1}
	r.dec.UseNumber()
	root, err := r.value(0)
	if err != nil {
		return nil, nil, err
	}
	if _, err := r.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, &Error{file, r.at(), "not JSON: more after the end of the top value"}
	}
	return root, r.warnings, nil
}

// at is the line of the decoder's position: the end of the token it read last.
func (r *jsonReader) at() int {
	end := int(r.dec.InputOffset())
	r.line += bytes.Count(r.data[r.offset:end], []byte("\n"))
	r.offset = end
	return r.line
}

// syntax turns a decoding error into one at its line of the file, speaking of JSON. A file cut
// short is told apart by Sluice, not by the error's text: encoding/json says so with io's
// unexpected EOF before Go 1.27, and with a syntax error at the end of the text from 1.27.
func (r *jsonReader) syntax(err error) error {
	var syn *json.SyntaxError
	isSyntax := errors.As(err, &syn)
	line := r.at()
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		isSyntax && int(syn.Offset) >= len(bytes.TrimRight(r.data, " \t\r\n")) && endsInsideValue(r.data):
		return &Error{r.file, line + bytes.Count(r.data[r.offset:], []byte("\n")), "not JSON: the file ends inside a value"}
	case isSyntax && int(syn.Offset) >= r.offset && int(syn.Offset) <= len(r.data):
		line += bytes.Count(r.data[r.offset:syn.Offset], []byte("\n"))
	}
	return &Error{r.file, line, "not JSON: " + err.Error()}
}

// endsInsideValue tells whether a JSON text ends inside a string or with an object or array
// still open.
func endsInsideValue(data []byte) bool {
	inString, depth := jsonscan.Brackets(data, nil)
	return inString || depth > 0
}

// value reads the next value, depth objects and arrays deep.
func (r *jsonReader) value(depth int) (*jsonNode, error) {
	tok, err := r.dec.Token()
	if err != nil {
		return nil, r.syntax(err)
	}
	n := &jsonNode{line: r.at()}
	if r.values++; r.values > MaxJSONValues {
		return nil, &Error{r.file, n.line, fmt.Sprintf("more than %d JSON values: not an nftlb config Sluice imports (split the file)", MaxJSONValues)}
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxNesting {
			return nil, &Error{r.file, n.line, fmt.Sprintf("objects and arrays nested more than %d deep: not an nftlb config", MaxNesting)}
		}
		if t == '{' {
			return n, r.object(n, depth)
		}
		return n, r.array(n, depth)
	case string:
		n.text = t
	case json.Number:
		n.text = string(t)
	case bool:
		n.text = strconv.FormatBool(t)
	case nil:
		n.kind = jsonNull
	}
	return n, nil
}

// object reads an object's members up to its }: a repeated key replaces the value before,
// with a warning.
func (r *jsonReader) object(n *jsonNode, depth int) error {
	n.kind = jsonObject
	index := map[string]int{}
	for r.dec.More() {
		tok, err := r.dec.Token()
		if err != nil {
			return r.syntax(err)
		}
		key, _ := tok.(string)
		line := r.at()
		v, err := r.value(depth + 1)
		if err != nil {
			return err
		}
		if i, dup := index[key]; dup {
			r.warnings = append(r.warnings, fmt.Sprintf("%s:%d: key %s is repeated (first at line %d): the last value is taken, as nftlb does", r.file, line, shown(key), n.items[i].line))
			n.items[i] = v
			continue
		}
		index[key] = len(n.keys)
		n.keys = append(n.keys, key)
		n.items = append(n.items, v)
	}
	_, err := r.dec.Token()
	if err != nil {
		return r.syntax(err)
	}
	return nil
}

// array reads an array's elements up to its ].
func (r *jsonReader) array(n *jsonNode, depth int) error {
	n.kind = jsonArray
	for r.dec.More() {
		v, err := r.value(depth + 1)
		if err != nil {
			return err
		}
		n.items = append(n.items, v)
	}
	if _, err := r.dec.Token(); err != nil {
		return r.syntax(err)
	}
	return nil
}

// scalars fills the string fields of out, a pointer to a struct, from the keys of object n
// their json tags name; errs gets a key whose value is an object or an array, at its line,
// and what (the object's kind and name) prefixes it. null is an absent key.
func scalars(n *jsonNode, out any, errs *problems, file, what string) {
	v := reflect.ValueOf(out).Elem()
	for i := range v.NumField() {
		field := v.Type().Field(i)
		key := field.Tag.Get("json")
		if key == "" || field.Type.Kind() != reflect.String {
			continue
		}
		switch val := n.get(key); {
		case val == nil || val.kind == jsonNull:
		case val.kind != jsonScalar:
			errs.add(file, val.line, "%s %s is %s: nftlb takes a string or a number", what, key, val.what())
		default:
			v.Field(i).SetString(val.text)
		}
	}
}
