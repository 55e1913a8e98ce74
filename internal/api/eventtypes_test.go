package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// engineEventTypes reads the engine's event types from its source: the string constants named
// Event... outside its tests.
func engineEventTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../engine/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) || !strings.HasPrefix(name.Name, "Event") {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						types = append(types, v)
					}
				}
			}
		}
	}
	slices.Sort(types)
	return types
}

// TestOpenAPIEventTypesAreTheEngines: the Event schema's type enum lists exactly the event types
// the engine publishes, so that a client validating against the document accepts every event.
func TestOpenAPIEventTypesAreTheEngines(t *testing.T) {
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, v := range doc.Components.Schemas["Event"].Value.Properties["type"].Value.Enum {
		documented = append(documented, v.(string))
	}
	slices.Sort(documented)
	engine := engineEventTypes(t)
	if len(engine) == 0 {
		t.Fatal("no Event... string constants found in ../engine")
	}
	if !slices.Equal(documented, engine) {
		t.Errorf("openapi.yaml's Event.type enum %v, the engine's event types %v", documented, engine)
	}
}
