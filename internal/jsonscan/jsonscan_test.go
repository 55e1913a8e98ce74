package jsonscan

import (
	"fmt"
	"slices"
	"testing"
)

// TestBrackets: brackets outside strings only (escaped quotes stay inside), each with the depth
// after it; a stop ends the walk; a text cut short ends inside a string or with brackets open.
func TestBrackets(t *testing.T) {
	var seen []string
	inString, depth := Brackets([]byte(`{"a": ["}", "\"]"], "b": {}}`), func(i int, c byte, depth int) bool {
		seen = append(seen, fmt.Sprintf("%d%c%d", i, c, depth))
		return true
	})
	if want := []string{"0{1", "6[2", "17]1", "25{2", "26}1", "27}0"}; !slices.Equal(seen, want) || inString || depth != 0 {
		t.Errorf("seen %v, in a string %v, depth %d; want %v, false, 0", seen, inString, depth, want)
	}
	calls := 0
	Brackets([]byte(`[[[[`), func(int, byte, int) bool { calls++; return calls < 2 })
	if calls != 2 {
		t.Errorf("%d calls after a stop at the second", calls)
	}
	for text, want := range map[string][2]any{`{"a": "x`: {true, 1}, `{"a": [1,`: {false, 2}, `{"a": 1}}`: {false, -1}, `"\\"`: {false, 0}} {
		if inString, depth := Brackets([]byte(text), nil); inString != want[0] || depth != want[1] {
			t.Errorf("%s: in a string %v, depth %d; want %v", text, inString, depth, want)
		}
	}
}
