package config

import (
	"encoding"
	"encoding/json"
	"reflect"
)

// Schema is a JSON Schema (draft 2020-12) node, with the keywords Sluice's schema uses.
type Schema struct {
	Schema               string             `json:"$schema,omitempty"`
	Title                string             `json:"title,omitempty"`
	Ref                  string             `json:"$ref,omitempty"`
	Type                 string             `json:"type,omitempty"`
	Enum                 []string           `json:"enum,omitempty"`
	Default              any                `json:"default,omitempty"`
	Const                *int64             `json:"const,omitempty"`
	Minimum              *int64             `json:"minimum,omitempty"`
	Maximum              *int64             `json:"maximum,omitempty"`
	Pattern              string             `json:"pattern,omitempty"`
	MaxLength            int                `json:"maxLength,omitempty"`
	MinItems             int                `json:"minItems,omitempty"`
	MaxItems             int                `json:"maxItems,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`
	AnyOf                []*Schema          `json:"anyOf,omitempty"`
	Defs                 map[string]*Schema `json:"$defs,omitempty"`
}

// JSONSchema describes the config file, generated from the model and the validator's rules:
// what it accepts, every file Validate accepts does; a few rules that span fields (a backend's
// family is its service's) are Validate's alone.
func JSONSchema() *Schema {
	g := schemaGen{defs: map[string]*Schema{}}
	root := g.object(reflect.TypeFor[Config]())
	root.Schema = "https://json-schema.org/draft/2020-12/schema"
	root.Title = "Sluice config"
	root.Defs = g.defs
	return root
}

// JSONSchemaText is JSONSchema as the indented JSON docs/sluice.schema.json holds.
func JSONSchemaText() []byte {
	out, err := json.MarshalIndent(JSONSchema(), "", "  ")
	if err != nil {
		panic(err) // a Schema always encodes
	}
	return append(out, '\n')
}

// textMarshalerType is the type of values written as text (addresses, prefixes): strings to the schema.
var textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()

// schemaGen builds a schema; defs holds one definition per struct type below the top.
type schemaGen struct{ defs map[string]*Schema }

func (g schemaGen) object(t reflect.Type) *Schema {
	s := &Schema{Type: "object", Properties: map[string]*Schema{}, AdditionalProperties: new(bool)}
	for _, f := range fieldsOf(t) {
		r := rules[f.owner][f.name]
		s.Properties[f.name] = g.value(f.typ, r)
		if r.required {
			s.Required = append(s.Required, f.name)
		}
	}
	return s
}

// value is the schema of a value of type t under rule r.
func (g schemaGen) value(t reflect.Type, r rule) *Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[Range]():
		return &Schema{AnyOf: []*Schema{r.integer(t), {Type: "string", Pattern: rangePattern.String()}}}
	case t.Kind() == reflect.Slice:
		return &Schema{Type: "array", Items: g.value(t.Elem(), r.ofItems()), MinItems: r.minItems, MaxItems: r.maxItems}
	case t.Kind() == reflect.Struct && !t.Implements(textMarshalerType):
		if _, done := g.defs[t.Name()]; !done {
			g.defs[t.Name()] = g.object(t)
		}
		return &Schema{Ref: "#/$defs/" + t.Name()}
	case isInteger(t):
		return r.integer(t)
	case t.Kind() == reflect.Bool:
		return &Schema{Type: "boolean"}
	}
	s := &Schema{Type: "string", Enum: r.enum, MaxLength: r.maxLength}
	if r.def != "" {
		s.Default = r.def
	}
	if r.pattern != nil {
		s.Pattern = r.pattern.String()
	}
	return s
}

// integer is the schema of a whole number of type t (Range: of its ends) under r.
func (r rule) integer(t reflect.Type) *Schema {
	b := r.bounds
	if b == nil && t.Kind() == reflect.Uint32 {
		b = &bounds{0, 1<<32 - 1}
	}
	in := &Schema{}
	if b != nil {
		in = &Schema{Minimum: &b.min, Maximum: &b.max}
	}
	if r.also != nil {
		return &Schema{Type: "integer", AnyOf: []*Schema{{Const: r.also}, in}}
	}
	in.Type = "integer"
	return in
}

// ofItems is the part of r that applies to each item of a list.
func (r rule) ofItems() rule {
	return rule{enum: r.enum, def: r.def, bounds: r.bounds, also: r.also, pattern: r.pattern, maxLength: r.maxLength}
}
