package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
)

// wrongTypePath finds the path ("backends[1].weight") of the first value of data, in document
// order, that does not decode into its place in t: the value a *json.UnmarshalTypeError was about.
// encoding/json names that place itself, but not the same way in every Go release: from Go 1.27 it
// leaves the field out when a type's own UnmarshalJSON refused the value (config's addresses,
// ranges and durations), and it never gives an array's index. So the body is decoded again one
// value at a time, following t's struct fields, slices, arrays and maps, and the first value that
// fails alone is the one named. ok is false when every value decodes alone.
func wrongTypePath(data []byte, t reflect.Type) (path string, ok bool) {
	return findWrongType(data, t, "")
}

func findWrongType(data []byte, t reflect.Type, path string) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return "", false // null leaves any place as it is
	}
	if pt := reflect.PointerTo(t); pt.Implements(unmarshalerType) || pt.Implements(textUnmarshalerType) {
		return path, json.Unmarshal(data, reflect.New(t).Interface()) != nil
	}
	switch t.Kind() {
	case reflect.Struct:
		members, ok := objectMembers(data)
		if !ok {
			return path, true
		}
		for _, m := range members {
			field, found := jsonField(t, m.key)
			if !found {
				continue // an unknown field is another error
			}
			if p, bad := findWrongType(m.value, field.Type, joinKey(path, m.key)); bad {
				return p, true
			}
		}
		return "", false
	case reflect.Map:
		members, ok := objectMembers(data)
		if !ok {
			return path, true
		}
		for _, m := range members {
			if p, bad := findWrongType(m.value, t.Elem(), joinKey(path, m.key)); bad {
				return p, true
			}
		}
		return "", false
	case reflect.Slice, reflect.Array:
		var elems []json.RawMessage
		if json.Unmarshal(data, &elems) != nil {
			return path, true
		}
		for i, e := range elems {
			if p, bad := findWrongType(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); bad {
				return p, true
			}
		}
		return "", false
	}
	return path, json.Unmarshal(data, reflect.New(t).Interface()) != nil
}

// The types that decode themselves: from any JSON (json.Unmarshaler), or from a string
// (encoding.TextUnmarshaler: netip.Addr, time.Time).
var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// member is one key of a JSON object and its value, undecoded.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers are the members of the JSON object data, in document order; ok is false when
// data is not an object.
func objectMembers(data []byte) (members []member, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, false
		}
		members = append(members, member{key, value})
	}
	return members, true
}

// jsonField is the field of struct t that encoding/json decodes key into: its name as tagged (or
// the Go name), the exact name before one that differs in case only, fields of embedded structs
// included.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var folded *reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || tag == "-" || (f.Anonymous && tag == "" && indirect(f.Type).Kind() == reflect.Struct) {
			continue
		}
		name := tag
		if name == "" {
			name = f.Name
		}
		switch {
		case name == key:
			return f, true
		case folded == nil && strings.EqualFold(name, key):
			folded = &f
		}
	}
	if folded != nil {
		return *folded, true
	}
	return reflect.StructField{}, false
}

func indirect(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// joinKey appends an object's key to a path.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
