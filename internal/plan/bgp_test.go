package plan

import (
	"reflect"
	"strings"
	"testing"
)

const bgpServices = `
services:
- {name: web, vip: 10.0.0.1, port: 80, bgp: {communities: ["65100:80"]}, backends: [{address: 10.0.1.1}]}
`

// TestNoteBGPSaysWhatChanges: the section's settings, peers added, removed and changed (a
// password only told changed), and a service's path attributes; nothing for the same section.
func TestNoteBGPSaysWhatChanges(t *testing.T) {
	const before = `
bgp:
  asn: 65100
  peers:
  - {address: 10.9.0.1, asn: 65000, hold_time: 9s, password: s3cret-a, bfd: true}
  - {address: 10.9.0.2, asn: 65000}
` + bgpServices
	const after = `
bgp:
  asn: 65101
  router_id: 10.9.0.11
  listen_port: 1790
  peers:
  - {address: 10.9.0.1, asn: 65000, password: s3cret-b, med: 5, bfd: true, bfd_interval: 50ms}
  - {address: "fd00::1", asn: 65000, port: 1179}
` + bgpServices
	oldCfg, newCfg := mustConfig(t, before), mustConfig(t, strings.Replace(after, `"65100:80"`, `"65100:81"`, 1))
	var c Change
	c.NoteBGP(oldCfg, newCfg)
	want := []BGPChange{
		{Op: OpChange, Field: "bgp.asn", From: "65100", To: "65101"},
		{Op: OpChange, Field: "bgp.router_id", From: "the node's first IPv4 address", To: "10.9.0.11"},
		{Op: OpChange, Field: "bgp.listen_port", From: "none (dials its peers only)", To: "1790"},
		{Op: OpChange, Field: "bgp.peers[10.9.0.1].hold_time", From: "9s", To: "1m30s"},
		{Op: OpChange, Field: "bgp.peers[10.9.0.1].bfd", From: "100ms x 3", To: "50ms x 3"},
		{Op: OpChange, Field: "bgp.peers[10.9.0.1].path_attributes", From: "none", To: "med 5"},
		{Op: OpChange, Field: "bgp.peers[10.9.0.1].password", From: "set", To: "another"},
		{Op: OpAdd, Field: "bgp.peers[fd00::1]", To: "port 1179, asn 65000, hold_time 1m30s, password none, next_hop the session's address, bfd off, path_attributes none"},
		{Op: OpRemove, Field: "bgp.peers[10.9.0.2]", From: "port 179, asn 65000, hold_time 1m30s, password none, next_hop the session's address, bfd off, path_attributes none"},
		{Op: OpChange, Field: "services[web].bgp", From: "communities 65100:80", To: "communities 65100:81"},
	}
	if !reflect.DeepEqual(c.BGP, want) {
		t.Errorf("changes:\n%+v\nwant\n%+v", c.BGP, want)
	}
	if c.Empty() {
		t.Error("a change of the bgp section alone is Empty")
	}
	for _, b := range c.BGP {
		if strings.Contains(b.From+b.To, "s3cret") {
			t.Errorf("a password shows: %+v", b)
		}
	}

	var same Change
	same.NoteBGP(oldCfg, mustConfig(t, before))
	if !same.Empty() {
		t.Errorf("the same section: %+v", same.BGP)
	}
	var added, removed Change
	added.NoteBGP(mustConfig(t, "services: []\n"), oldCfg)
	removed.NoteBGP(oldCfg, mustConfig(t, "services: []\n"))
	if len(added.BGP) != 1 || added.BGP[0].Op != OpAdd || added.BGP[0].To != "asn 65100, router_id the node's first IPv4 address, listen_port none (dials its peers only), shutdown_grace 5s, 2 peers" {
		t.Errorf("section added: %+v", added.BGP)
	}
	if len(removed.BGP) != 1 || removed.BGP[0].Op != OpRemove || removed.BGP[0].Field != "bgp" {
		t.Errorf("section removed: %+v", removed.BGP)
	}
}
