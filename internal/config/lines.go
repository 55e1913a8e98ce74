package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// lineIndex maps field paths such as "services[0].backends[2].address" to their line in the file.
type lineIndex map[string]int

func (li lineIndex) lookup(path string) int {
	// An error on a missing field points at its closest present parent.
	for p := path; p != ""; {
		if l, ok := li[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// indexLines walks a decoded YAML document and records the line of every mapping value and sequence item.
func indexLines(root *yaml.Node) lineIndex {
	li := lineIndex{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				li[p] = n.Content[i].Line
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				li[p] = c.Line
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return li
}
