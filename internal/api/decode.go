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
	return v, decodeJSON(data, &v)
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
func dryRun(r *http.Request) (bool, error) {
	text := r.URL.Query().Get("dry_run")
	if text == "" {
		return false, nil
	}
	dry, err := strconv.ParseBool(text)
	if err != nil {
		return false, invalid("dry_run", "%q is not true or false", text)
	}
	return dry, nil
}
