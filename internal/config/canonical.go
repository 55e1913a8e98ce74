package config

import (
	"reflect"
	"strings"
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
	case reflect.Slice:
		for i := range v.Len() {
			dropEmptyLists(v.Index(i))
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := v.Field(i)
			if !t.Field(i).IsExported() {
				continue
			}
			if omitsEmpty(t.Field(i)) && (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) &&
				!f.IsNil() && f.Len() == 0 {
				f.SetZero()
				continue
			}
			dropEmptyLists(f)
		}
	}
}

// omitsEmpty reports whether a field's JSON encoding leaves it out when empty.
func omitsEmpty(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	for opt := range strings.SplitSeq(opts, ",") {
		if opt == "omitempty" {
			return true
		}
	}
	return false
}
