package nft

import "testing"

func TestCoalesceJoinsConsecutiveElementsOfOneSet(t *testing.T) {
	in := `add chain inet sluice svc-web-1
add element inet sluice slots-web-1 { 0 : goto be-a }
add element inet sluice slots-web-1 { 1 : goto be-b }
add element inet sluice dispatch4 { tcp . 10.0.0.1 . 80 comment "web tcp 10.0.0.1 80 nat maglev" : goto svc-web-1 }
add element inet sluice slots-web-1 { 2 : goto be-a }
delete element inet sluice slots-web-2 { 0 }
delete element inet sluice slots-web-2 { 1 }
delete chain inet sluice svc-web-2
`
	want := `add chain inet sluice svc-web-1
add element inet sluice slots-web-1 { 0 : goto be-a, 1 : goto be-b }
add element inet sluice dispatch4 { tcp . 10.0.0.1 . 80 comment "web tcp 10.0.0.1 80 nat maglev" : goto svc-web-1 }
add element inet sluice slots-web-1 { 2 : goto be-a }
delete element inet sluice slots-web-2 { 0, 1 }
delete chain inet sluice svc-web-2
`
	got, err := coalesce(in)
	if err != nil || got != want {
		t.Fatalf("coalesce = %v\n%s\nwant\n%s", err, got, want)
	}
	if _, err := coalesce("add table inet sluice\n# ERROR: bad element"); err == nil {
		t.Error("a transaction in error was run")
	}
}
