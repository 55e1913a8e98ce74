package config

import (
	"reflect"
	"slices"
	"strings"
	"sync"
)

// DropEmptyLists sets to nil every empty list and map of an omitempty field in what v points
// to; config files and API bodies are decoded through it. A config written back (the state
// file, the API's answers, persist: config-file) leaves such a field out, so read again it is
// nil: one value for "none" whatever the input wrote ("communities: []" or nothing). Without it
// a client that puts back the config it got would change a section it may not (the API
// compares bgp and sync as they are), and a restart from the state file would see changes.
func DropEmptyLists(v any) { dropEmptyLists(reflect.ValueOf(v)) }

func dropEmptyLists(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			dropEmptyLists(v.Elem())
		}
	case reflect.Slice: // a field's slice is visited only when its elements hold some (listOmittable)
		for i := range v.Len() {
			dropEmptyLists(v.Index(i))
		}
	case reflect.Struct:
		fields := omittableFields(v.Type())
		for _, i := range fields.lists {
			if f := v.Field(i); !f.IsNil() && f.Len() == 0 {
				f.SetZero()
			}
		}
		for _, i := range fields.nested {
			dropEmptyLists(v.Field(i))
		}
	}
}

// omittable are the fields of a struct type that DropEmptyLists visits: lists lists its
// omitempty lists and maps, nested the fields that hold some further down. Found once per type:
// a config of 10,000 services is 10,000 visits of Service.
type omittable struct{ lists, nested []int }

var (
	omittableByType sync.Map
	// omittableMu serializes the finding, so that no caller reads a type's half-listed fields.
	omittableMu sync.Mutex
)

func omittableFields(t reflect.Type) omittable {
	if known, ok := omittableByType.Load(t); ok {
		return known.(omittable)
	}
	omittableMu.Lock()
	defer omittableMu.Unlock()
	return listOmittable(t, map[reflect.Type]bool{})
}

// listOmittable finds t's omittable fields; visiting holds the struct types being listed, which
// a recursive type meets again inside itself.
func listOmittable(t reflect.Type, visiting map[reflect.Type]bool) omittable {
	if known, ok := omittableByType.Load(t); ok {
		return known.(omittable)
	}
	visiting[t] = true
	var o omittable
	for i := range t.NumField() {
		f := t.Field(i)
		switch {
		case !f.IsExported():
		case omitsEmpty(f) && (f.Type.Kind() == reflect.Slice || f.Type.Kind() == reflect.Map):
			o.lists = append(o.lists, i)
			if f.Type.Kind() == reflect.Slice && holdsOmittable(f.Type.Elem(), visiting) {
				o.nested = append(o.nested, i)
			}
		case holdsOmittable(f.Type, visiting):
			o.nested = append(o.nested, i)
		}
	}
	omittableByType.Store(t, o)
	return o
}

// holdsOmittable tells whether a value of t can hold an omitempty list or map; a type being
// listed (in visiting) is taken to hold some.
func holdsOmittable(t reflect.Type, visiting map[reflect.Type]bool) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		return holdsOmittable(t.Elem(), visiting)
	case reflect.Interface:
		return true
	case reflect.Struct:
		if visiting[t] {
			return true
		}
		o := listOmittable(t, visiting)
		return len(o.lists) > 0 || len(o.nested) > 0
	}
	return false
}

// omitsEmpty reports whether a field's JSON encoding leaves it out when empty.
func omitsEmpty(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	return slices.Contains(strings.Split(opts, ","), "omitempty")
}
