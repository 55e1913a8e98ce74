package config

import (
	"reflect"
	"testing"
)

// TestCloneSharesNothing fills every field of a config (new fields included, by reflection),
// clones it and checks that the copy is equal and that no pointer or slice is shared.
func TestCloneSharesNothing(t *testing.T) {
	var c Config
	fill(reflect.ValueOf(&c).Elem())
	clone := c.Clone()
	if !reflect.DeepEqual(&c, clone) {
		t.Fatalf("clone differs:\n%+v\n%+v", c, *clone)
	}
	assertDisjoint(t, "config", reflect.ValueOf(c), reflect.ValueOf(*clone))
}

// fill sets every exported field reachable from v to a non-zero value, slices to one element.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Int:
		v.SetInt(1)
	case reflect.Bool:
		v.SetBool(true)
	}
}

// assertDisjoint fails when a and b share a pointer or a slice's backing array anywhere.
func assertDisjoint(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the pointer", path)
		}
		assertDisjoint(t, path, a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the slice", path)
		}
		for i := range a.Len() {
			assertDisjoint(t, path+"[]", a.Index(i), b.Index(i))
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				assertDisjoint(t, path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
			}
		}
	}
}
