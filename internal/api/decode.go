package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Media types of bodies.
const (
	mediaJSON = "application/json"
	mediaYAML = "application/yaml"
)

// yamlMediaTypes are the names YAML goes by in Content-Type and Accept.
var yamlMediaTypes = []string{mediaYAML, "application/x-yaml", "text/yaml"}

// readBody checks that the body's Content-Type is one of accepted (none counts as JSON) and reads
// the body; it returns the body and its media type.
func readBody(r *http.Request, accepted ...string) ([]byte, string, error) {
	media := mediaJSON
	if header := r.Header.Get("Content-Type"); header != "" {
		parsed, _, err := mime.ParseMediaType(header)
		if err != nil || !slices.Contains(accepted, parsed) {
			return nil, "", &Error{Status: http.StatusUnsupportedMediaType,
				Message: fmt.Sprintf("Content-Type %q is not accepted here: send %s", header, strings.Join(accepted, " or "))}
		}
		media = parsed
	}
	data, err := io.ReadAll(r.Body)
	return data, media, err
}

// readJSON reads a body that must be one JSON value of type T; see decodeJSON.
func readJSON[T any](r *http.Request) (T, error) {
	var v T
	data, _, err := readBody(r, mediaJSON)
	if err != nil {
		return v, err
	}
	err = decodeJSON(data, &v)
	return v, err
}

// decodeJSON decodes exactly one JSON object into v, strictly: an empty body, an unknown field, a
// value of the wrong type or data after the object is a 400 naming the field where it can.
func decodeJSON(data []byte, v any) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return invalid("", "the request body is empty: send a JSON object")
	}
	if trimmed[0] != '{' {
		return invalid("", "the request body must be a JSON object")
	}
	if path, key, dup := duplicateKey(data); dup {
		return invalid(path, "the key %q is already in this object: a key may be given once (keys match regardless of case)", key)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("", "the request body holds more than one JSON value")
	}
	return nil
}

// duplicateKey finds a key given twice in one object of a JSON text, which encoding/json would
// take silently, the last one winning, as it matches keys to fields regardless of case. It
// returns the second key's path ("backends[1].weight") and the first key. JSON that does not
// parse has none: decoding reports it.
func duplicateKey(data []byte) (path, key string, dup bool) {
	// scope is an object or array being read: where it is and what it has held so far.
	type scope struct {
		path  string
		keys  map[string]string // an object's keys, folded to lower case, to the key as given; nil for an array
		key   string            // the object's key whose value comes next, when keyed
		keyed bool              // a key was read and its value comes next
		index int               // the array's next index
	}
	// next is the path of the value about to be read in s, and steps past it.
	next := func(s *scope) string {
		if s.keys == nil {
			s.index++
			return fmt.Sprintf("%s[%d]", s.path, s.index-1)
		}
		s.keyed = false
		if s.path == "" {
			return s.key
		}
		return s.path + "." + s.key
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	stack := []*scope{{}}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false
		}
		top := stack[len(stack)-1]
		switch tok {
		case json.Delim('{'), json.Delim('['):
			s := &scope{path: top.path}
			if len(stack) > 1 {
				s.path = next(top)
			}
			if tok == json.Delim('{') {
				s.keys = map[string]string{}
			}
			stack = append(stack, s)
			continue
		case json.Delim('}'), json.Delim(']'):
			if stack = stack[:len(stack)-1]; len(stack) == 1 {
				return "", "", false
			}
			continue
		}
		if text, isKey := tok.(string); isKey && top.keys != nil && !top.keyed {
			top.key, top.keyed = text, true
			folded := strings.ToLower(text)
			if first, seen := top.keys[folded]; seen {
				return next(top), first, true
			}
			top.keys[folded] = text
			continue
		}
		if len(stack) == 1 {
			return "", "", false
		}
		next(top)
	}
}

// jsonError explains why a body did not decode.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var wrongType *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return invalid("", "invalid JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &wrongType) && wrongType.Field == "":
		return invalid("", "the request body must be %s, not %s", jsonKind(wrongType.Type), wrongType.Value)
	case errors.As(err, &wrongType):
		return invalid(wrongType.Field, "must be %s, not %s", jsonKind(wrongType.Type), wrongType.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "the JSON body ends too early")
	}
	// encoding/json reports unknown fields only in the text of a plain error.
	if quoted, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field, _ := strconv.Unquote(quoted)
		return invalid(field, "unknown field")
	}
	return invalid("", "%v", err)
}

// jsonKind names the JSON a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// dryRun reads ?dry_run=true: report what the change would do, change nothing.
func dryRun(r *http.Request) (bool, error) { return boolParam(r, "dry_run", false) }
