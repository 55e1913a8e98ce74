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

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/jsonscan"
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

// MaxJSONDepth bounds how deep a JSON body may nest objects and arrays; no config comes near it
// (services[].health_check.expect_status[] is 4 deep). It is checked by one pass over the bytes
// before any decoding, so that a deep body costs neither memory nor time.
const MaxJSONDepth = 32

// MaxJSONObjects bounds the objects in one JSON body. Each decodes into a Go value of up to a
// couple of kilobytes (a service), so a megabyte of `{},` would cost gigabytes decoded; a real
// body of 1 MiB (MaxBodyBytes) holds at most about 40,000 (backends of 26 bytes each). Checked in
// the same pass as the depth.
const MaxJSONObjects = 65536

// decodeJSON decodes exactly one JSON object into v, strictly: an empty body, a body nested deeper
// than MaxJSONDepth, an unknown field, a key given twice, a value of the wrong type or data after
// the object is a 400 naming the field where it can.
func decodeJSON(data []byte, v any) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return invalid("", "the request body is empty: send a JSON object")
	}
	if err := checkShape(data); err != nil {
		return err
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
		return jsonError(err, data, reflect.TypeOf(v))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("", "the request body holds more than one JSON value")
	}
	config.DropEmptyLists(v)
	return nil
}

// checkShape refuses a JSON text that nests objects and arrays more than MaxJSONDepth deep or
// holds more than MaxJSONObjects objects, naming the byte; brackets inside strings do not count.
// It reads each byte once and allocates nothing, whether the text is JSON or not.
func checkShape(data []byte) error {
	var err error
	objects := 0
	jsonscan.Brackets(data, func(i int, bracket byte, depth int) bool {
		if bracket == '{' {
			objects++
		}
		switch {
		case depth > MaxJSONDepth:
			err = invalid("", "the JSON nests objects and arrays more than %d deep (at byte %d): %d is the limit", MaxJSONDepth, i, MaxJSONDepth)
		case objects > MaxJSONObjects:
			err = invalid("", "the JSON holds more than %d objects (at byte %d): send the change in parts", MaxJSONObjects, i)
		}
		return err == nil
	})
	return err
}

// duplicateKey finds a key given twice in one object of a JSON text, which encoding/json would
// take silently, the last one winning, as it matches keys to fields regardless of case. It
// returns the second key's path ("backends[1].weight") and the first key. JSON that does not
// parse has none: decoding reports it. The path is built only for the duplicate found, and one
// map holds the keys of every object, so the work is linear in the text.
func duplicateKey(data []byte) (path, key string, dup bool) {
	// seenKey is a key (folded to lower case) of the object numbered object.
	type seenKey struct {
		object int
		key    string
	}
	seen := map[seenKey]string{} // to the key as given
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []jsonScope
	objects := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) > 0 {
				stack[len(stack)-1].step()
			}
			objects++
			stack = append(stack, jsonScope{object: tok == json.Delim('{'), id: objects, index: -1})
			continue
		case json.Delim('}'), json.Delim(']'):
			if stack = stack[:len(stack)-1]; len(stack) == 0 {
				return "", "", false
			}
			continue
		}
		if len(stack) == 0 {
			return "", "", false
		}
		top := &stack[len(stack)-1]
		text, isKey := tok.(string)
		if !isKey || !top.object || top.keyed {
			top.step()
			continue
		}
		top.key, top.keyed = text, true
		k := seenKey{top.id, strings.ToLower(text)}
		if first, ok := seen[k]; ok {
			return scopePath(stack), first, true
		}
		seen[k] = text
	}
}

// jsonScope is an object or array duplicateKey is in: which one, and where in it.
type jsonScope struct {
	object bool   // an object, else an array
	id     int    // numbers the scope in the text
	key    string // an object's last key
	keyed  bool   // an object's key was read and its value comes next
	index  int    // an array's last index (-1 before the first value)
}

// step moves past a value of the scope: the value of an object's key, or an array's next one.
func (s *jsonScope) step() {
	if s.object {
		s.keyed = false
	} else {
		s.index++
	}
}

// scopePath is the path of the innermost scope's current key ("backends[1].weight").
func scopePath(stack []jsonScope) string {
	var b strings.Builder
	for _, s := range stack {
		switch {
		case !s.object:
			fmt.Fprintf(&b, "[%d]", s.index)
		case b.Len() > 0:
			b.WriteString("." + s.key)
		default:
			b.WriteString(s.key)
		}
	}
	return b.String()
}

// jsonError explains why data, a body for a value of type t, did not decode.
func jsonError(err error, data []byte, t reflect.Type) error {
	var syntax *json.SyntaxError
	var wrongType *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return invalid("", "invalid JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &wrongType):
		if path, ok := wrongTypePath(data, t); ok && path != "" {
			return invalid(path, "must be %s, not %s", jsonKind(wrongType.Type), wrongType.Value)
		}
		return invalid("", "the request body must be %s, not %s", jsonKind(wrongType.Type), wrongType.Value)
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
