package api

import (
	"encoding/json"
	"testing"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
)

// TestOpenAPIServiceViewRefused: a service view with refusals matches the document, and one
// without leaves the object out.
func TestOpenAPIServiceViewRefused(t *testing.T) {
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	schema := doc.Components.Schemas["ServiceView"].Value
	for _, refused := range []datapath.Refusals{{}, {SourceList: 1, ConnectionsPerSource: 2, Connections: 3,
		NewConnectionsPerSourcePerSecond: 4, NewConnectionsPerSecond: 5}} {
		b, err := json.Marshal(engine.ServiceView{Name: "web", Protocol: "tcp", Mode: "nat", Fallback: "drop", Refused: refused})
		if err != nil {
			t.Fatal(err)
		}
		var view map[string]any
		if err := json.Unmarshal(b, &view); err != nil {
			t.Fatal(err)
		}
		if _, has := view["refused"]; has != (refused != datapath.Refusals{}) {
			t.Errorf("%s: refused present %v", b, has)
		}
		if err := schema.VisitJSON(view); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
}
