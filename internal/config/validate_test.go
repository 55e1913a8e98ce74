package config

import (
	"strings"
	"testing"
)

// TestValidServiceNameIsThePattern: the hand-written check accepts exactly what the schema's
// serviceName pattern does.
func TestValidServiceNameIsThePattern(t *testing.T) {
	names := []string{"", "a", "A", "9", "_a", "-a", "a9", "a_b-c", "a.b", "a b", "a\\n", "a\\n\\n", "é", "aé",
		"web\n", "\nweb", strings.Repeat("a", 32), strings.Repeat("a", 33), "a" + strings.Repeat("9", 31), "Z/",
		"a\x00", "a`", "a[", "a{", "a@", "a:", "a/"}
	for c := range 256 {
		names = append(names, "a"+string(rune(c)), string([]byte{byte(c)}), string([]byte{'a', byte(c)}))
	}
	for _, name := range names {
		if got, want := validServiceName(name), serviceName.MatchString(name); got != want {
			t.Errorf("validServiceName(%q) = %v, the pattern says %v", name, got, want)
		}
	}
}

// FuzzValidServiceName: the hand-written check and the pattern agree on any text.
func FuzzValidServiceName(f *testing.F) {
	f.Add("web")
	f.Add("9lives")
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := validServiceName(name), serviceName.MatchString(name); got != want {
			t.Errorf("validServiceName(%q) = %v, the pattern says %v", name, got, want)
		}
	})
}
