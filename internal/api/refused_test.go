package api

import (
	"encoding/json"
	"testing"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
)

// TestOpenAPIServiceViewRefused: a service view with refusals and SYN cookies matches the
// document, and one without leaves the objects out.
func TestOpenAPIServiceViewRefused(t *testing.T) {
	doc, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	schema := doc.Components.Schemas["ServiceView"].Value
	for _, refused := range []datapath.Refusals{{}, {SourceList: 1, ConnectionsPerSource: 2, Connections: 3,
		NewConnectionsPerSourcePerSecond: 4, NewConnectionsPerSecond: 5}} {
		var cookies datapath.SYNCookies
		if refused != (datapath.Refusals{}) {
			cookies = datapath.SYNCookies{Sent: 3, Validated: 2, Rejected: 1}
		}
		b, err := json.Marshal(engine.ServiceView{Name: "web", Protocol: "tcp", Mode: "nat", Fallback: "drop", Refused: refused, SYNCookies: cookies})
		if err != nil {
			t.Fatal(err)
		}
		var view map[string]any
		if err := json.Unmarshal(b, &view); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"refused", "syn_cookies"} {
			if _, has := view[key]; has != (refused != datapath.Refusals{}) {
				t.Errorf("%s: %s present %v", b, key, has)
			}
		}
		if err := schema.VisitJSON(view); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
}
