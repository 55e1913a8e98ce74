package config

import (
	"fmt"
	"strings"
	"testing"
)

// bigConfig is a config of n services of two backends each, written as operators write them.
func bigConfig(n int) []byte {
	var b strings.Builder
	b.WriteString("datapath: nft\nservices:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: svc%d\n    vip: 10.%d.%d.%d\n    port: 80\n    backends:\n", i, 92+i/65536, i/256%256, i%256)
		b.WriteString("      - {address: 10.91.2.100, port: 8080}\n      - {address: 10.91.2.101, port: 8080}\n")
	}
	return []byte(b.String())
}

// BenchmarkParse10kServices is the parse of `sluice apply -f` or `plan -f` on a balancer of
// 10,000 services (issue 32: a one-line change must take well under a second).
func BenchmarkParse10kServices(b *testing.B) {
	data := bigConfig(10000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("big.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDropEmptyLists is DropEmptyLists' share of BenchmarkParse10kServices.
func BenchmarkDropEmptyLists(b *testing.B) {
	cfg, err := Parse("big.yaml", bigConfig(10000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		DropEmptyLists(cfg)
	}
}
