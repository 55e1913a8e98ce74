// Package jsonscan walks the brackets of a JSON text in one pass over its bytes, without decoding
// it: what a reader needs to bound a text's nesting before decoding it, or to tell a text cut
// short from one that is wrong.
package jsonscan

// Brackets calls visit for each '{', '[', '}' and ']' of a JSON text outside its strings, at byte
// i, with the depth of nesting after it, until visit returns false. It returns whether the text
// ends inside a string and the depth at its end (the brackets still open). It allocates nothing
// and takes any bytes, JSON or not.
func Brackets(data []byte, visit func(i int, bracket byte, depth int) bool) (inString bool, depth int) {
	escaped := false
	for i, c := range data {
		switch {
		case escaped:
			escaped = false
			continue
		case inString:
			escaped, inString = c == '\\', c != '"'
			continue
		case c == '"':
			inString = true
			continue
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		default:
			continue
		}
		if visit != nil && !visit(i, c, depth) {
			break
		}
	}
	return inString, depth
}
