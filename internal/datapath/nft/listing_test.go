package nft

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// listingSample is nft 1.0.6's JSON listing of a table, shortened: every kind of element Sluice
// writes, a dynamic flow map whose elements are not read, and objects that are skipped.
const listingSample = `{"nftables": [
{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
{"table": {"family": "inet", "name": "sluice", "handle": 4}},
{"counter": {"family": "inet", "name": "c-voip-6b2dffd4", "table": "sluice", "handle": 1, "packets": 7, "bytes": 420}},
{"map": {"family": "inet", "name": "dispatch4", "table": "sluice", "type": ["inet_proto", "ipv4_addr", "inet_service"], "handle": 5, "map": "verdict", "flags": ["interval"],
  "elem": [[{"elem": {"val": {"concat": ["udp", "10.91.9.103", {"range": [5060, 5069]}]}, "comment": "voip udp 10.91.9.103 5060-5069 nat hash"}}, {"goto": {"target": "svc-voip-12cbd735"}}]]}},
{"set": {"family": "inet", "name": "fullnat-tcp4", "table": "sluice", "type": ["ipv4_addr", "inet_service"], "handle": 9, "flags": ["interval"],
  "elem": [{"elem": {"val": {"concat": ["10.91.9.101", 8080]}, "comment": "api tcp 10.91.9.101 8080 fullnat maglev"}}]}},
{"map": {"family": "inet", "name": "members-voip-12cbd735", "table": "sluice", "type": ["ipv4_addr", "inet_service"], "handle": 12, "map": "mark",
  "elem": [[{"concat": ["10.91.2.11", 0]}, 1], [{"concat": ["10.91.2.12", 5080]}, 2]]}},
{"map": {"family": "inet", "name": "slots-voip-12cbd735", "table": "sluice", "type": "integer", "handle": 13, "map": "verdict",
  "elem": [[0, {"goto": {"target": "be-voip-1"}}], [1, {"drop": null}]]}},
{"map": {"family": "netdev", "name": "flows-game-1", "table": "sluice", "type": ["ipv4_addr", "inet_service", "inet_service"], "handle": 14, "map": "mark",
  "elem": [[{"elem": {"val": {"concat": ["10.91.1.2", 4000, 27000]}, "timeout": 30, "expires": 29}}, 42]]}},
{"chain": {"family": "inet", "table": "sluice", "name": "svc-voip-12cbd735", "handle": 15}},
{"rule": {"family": "inet", "table": "sluice", "chain": "svc-voip-12cbd735", "handle": 16, "expr": [{"drop": null}]}}
]}`

func TestDecodeListing(t *testing.T) {
	st := newState()
	err := decodeListing(strings.NewReader(listingSample), func(o *listedObject) error {
		return st.addListed(knftables.InetFamily, o)
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{}
	for k, d := range st.sets {
		ids[k.name] = sortedIDs(d.elems)
	}
	want := map[string][]string{
		"dispatch4":             {"voip udp 10.91.9.103 5060-5069 nat hash : goto svc-voip-12cbd735"},
		"fullnat-tcp4":          {"api tcp 10.91.9.101 8080 fullnat maglev : "},
		"members-voip-12cbd735": {"10.91.2.11 . 0 : 1", "10.91.2.12 . 5080 : 2"},
		"slots-voip-12cbd735":   {"0 : goto be-voip-1", "1 : drop"},
		"flows-game-1":          {},
	}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("elements read back:\n%v\nwant\n%v", ids, want)
	}
	dispatch := st.sets[objKey{knftables.InetFamily, "dispatch4"}].elems
	for _, e := range dispatch {
		if got := strings.Join(e.Key, " . "); got != "udp . 10.91.9.103 . 5060-5069" || e.Map != "dispatch4" || e.Family != knftables.InetFamily {
			t.Errorf("dispatch element %+v, key %s", e, got)
		}
	}
	c := st.counters[objKey{knftables.InetFamily, "c-voip-6b2dffd4"}]
	if c == nil || *c.Packets != 7 || *c.Bytes != 420 || c.Handle != nil {
		t.Errorf("counter %+v", c)
	}
	if st.chains[objKey{knftables.InetFamily, "svc-voip-12cbd735"}] == nil || len(st.chains) != 1 {
		t.Errorf("chains %v", st.chains)
	}
}

func TestDecodeListingRejectsWhatItCannotRead(t *testing.T) {
	for _, listing := range []string{
		`{"nftables": [{"map": {"name": "m", "elem": [[1]]}}]}`,
		`{"nftables": [{"set": {"name": "s", "elem": [{"unknown": [1, 2, 3]}]}}]}`,
		`{"other": []}`,
		`{"nftables": [{"set": `,
	} {
		err := decodeListing(strings.NewReader(listing), func(o *listedObject) error {
			return newState().addListed(knftables.InetFamily, o)
		})
		if err == nil {
			t.Errorf("%s: no error", listing)
		}
	}
}
