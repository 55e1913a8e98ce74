package nft

import (
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

func TestSharedObjectNamesRoundTrip(t *testing.T) {
	for _, v := range []ipv{ipv4, ipv6} {
		for _, ranged := range []bool{false, true} {
			objs := []sharedObject{{kind: dispatchKind, v: v, ranged: ranged}}
			for _, proto := range []string{"tcp", "udp"} {
				objs = append(objs, sharedObject{fullNATKind, proto, v, ranged}, sharedObject{forwardedKind, proto, v, ranged})
			}
			for _, kind := range []sharedKind{synproxyKind, cookieAckKind, cookieOKKind} {
				objs = append(objs, sharedObject{kind, "tcp", v, ranged})
			}
			for _, o := range objs {
				got, ok := parseSharedObject(o.String())
				if !ok || got != o {
					t.Errorf("parseSharedObject(%q) = %+v, %v; want %+v", o.String(), got, ok, o)
				}
				if _, ok := parseServiceObject(o.String()); ok {
					t.Errorf("%q parses as a service's object", o.String())
				}
			}
		}
	}
}

// TestSharedObjectNames pins the names the golden rulesets and running kernels hold.
func TestSharedObjectNames(t *testing.T) {
	for o, want := range map[sharedObject]string{
		{kind: dispatchKind, v: ipv4}:               "dispatch-port4",
		{kind: dispatchKind, v: ipv6, ranged: true}: "dispatch-range6",
		{fullNATKind, "udp", ipv6, true}:            "fullnat-range-udp6",
		{forwardedKind, "tcp", ipv4, false}:         "forwarded-port-tcp4",
	} {
		if o.String() != want {
			t.Errorf("%+v names %q, want %q", o, o.String(), want)
		}
	}
}

func TestServiceObjectNamesRoundTrip(t *testing.T) {
	for _, service := range []string{"web", "web-api", "be-x", "svc-1"} {
		for _, kind := range serviceKinds {
			o := serviceObject{kind: kind, service: service, hash: hash8(service, string(kind))}
			if got, ok := parseServiceObject(o.String()); !ok || got != o {
				t.Errorf("parseServiceObject(%q) = %+v, %v; want %+v", o.String(), got, ok, o)
			}
			if _, ok := parseSharedObject(o.String()); ok {
				t.Errorf("%q parses as a shared object", o.String())
			}
		}
		chain := backendChain(service, "tcp", "10.0.0.1:80", "eth1")
		o, ok := parseServiceObject(chain)
		if !ok || o.kind != backendChains || o.service != service || o.hash != hash8("tcp", "10.0.0.1:80") || o.device != hash8("eth1")[:4] {
			t.Errorf("parseServiceObject(%q) = %+v, %v", chain, o, ok)
		}
		if got, want := withoutDevice(chain), backendChain(service, "tcp", "10.0.0.1:80", ""); got != want {
			t.Errorf("withoutDevice(%q) = %q, want %q", chain, got, want)
		}
		counter := counterName(packetCounter, service, "10.0.0.1:80")
		if o, ok := parseServiceObject(counter); !ok || o.kind != packetCounter || o.service != service || o.hash != hash8("10.0.0.1:80") {
			t.Errorf("parseServiceObject(%q) = %+v, %v", counter, o, ok)
		}
	}
}

// TestServiceNames checks that every name of a service's objects parses back to the service
// and its hash, the hash a dispatch element's goto verdict gives Which and the listing.
func TestServiceNames(t *testing.T) {
	s := &plan.Service{Name: "web", VIP: netip.MustParseAddr("10.0.0.1"), Ports: config.PortList{{First: 80, Last: 80}},
		Protocol: "tcp", Mode: "dsr", Scheduler: "maglev", Fallback: "drop"}
	n := namesOf(s)
	chain, ok := parseGoto(gotoVerdict(n.chain))
	if !ok || chain != n.chain {
		t.Fatalf("parseGoto(gotoVerdict(%q)) = %q, %v", n.chain, chain, ok)
	}
	o, ok := parseServiceObject(chain)
	if !ok || o.kind != serviceChain || o.service != s.Name {
		t.Fatalf("parseServiceObject(%q) = %+v, %v", chain, o, ok)
	}
	if got := serviceNamesOf(o.service, o.hash); got != n {
		t.Errorf("serviceNamesOf(%q, %q) = %+v, want %+v", o.service, o.hash, got, n)
	}
	for kind, name := range map[serviceKind]string{serviceChain: n.chain, slotsMap: n.slots, membersMap: n.members,
		flowsMap: n.flows, marksMap: n.marks, newFlowsMap: n.newFlows} {
		if got, ok := parseServiceObject(name); !ok || got != (serviceObject{kind: kind, service: s.Name, hash: o.hash}) {
			t.Errorf("parseServiceObject(%q) = %+v, %v", name, got, ok)
		}
	}
}

func TestForeignNames(t *testing.T) {
	for _, name := range []string{"", "prerouting", "prerouting-1a2b3c4d", "forwarded-1a2b3c4d", "ingress-eth0-1a2b3c4d",
		"dispatch-port", "dispatch-port5", "dispatch-port-tcp4", "fullnat-port4", "fullnat-port-sctp4", "forwarded-any-tcp4",
		"svc-web", "svc--8c2c44ca", "svc-web-8C2C44CA", "svc-web-8c2c44c", "be-web-8c2c44ca-1a2", "kube-proxy", "goto svc-web-8c2c44ca"} {
		if o, ok := parseServiceObject(name); ok {
			t.Errorf("parseServiceObject(%q) = %+v, want a foreign name", name, o)
		}
		if o, ok := parseSharedObject(name); ok {
			t.Errorf("parseSharedObject(%q) = %+v, want a foreign name", name, o)
		}
	}
	if chain, ok := parseGoto("jump svc-web-8c2c44ca"); ok {
		t.Errorf("parseGoto of a jump = %q", chain)
	}
	if got := withoutDevice("prerouting-1a2b3c4d"); got != "prerouting-1a2b3c4d" {
		t.Errorf("withoutDevice changed a foreign name to %q", got)
	}
}

func TestServiceOf(t *testing.T) {
	for name, want := range map[string]string{
		"svc-web-8c2c44ca":            "web",
		"slots-web-api-8c2c44ca":      "web-api",
		"be-web-8c2c44ca":             "web",
		"be-web-8c2c44ca-1a2b":        "web",
		"be-x-12345678-abcd-0badf00":  "",
		"be-x-12345678-abcd-0badf00d": "x-12345678-abcd",
		"c-web-0011aabb":              "web",
		"p-a-b-0011aabb":              "a-b",
		"dispatch-port4":              "",
		"prerouting-1a2b3c4d":         "",
		"forwarded-range-tcp4":        "",
		"fullnat-udp6":                "",
		"prerouting":                  "",
		"ingress-eth0":                "",
		"svc-web":                     "",
	} {
		if got := serviceOf(name); got != want {
			t.Errorf("serviceOf(%q) = %q, want %q", name, got, want)
		}
	}
}
