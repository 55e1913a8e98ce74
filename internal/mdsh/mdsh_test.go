package mdsh

import (
	"reflect"
	"strings"
	"testing"
)

func TestBlocks(t *testing.T) {
	doc := "# Title\n" + // 1
		"```sh\n" + // 2
		"make build   # bin/sluice\n" + // 3
		"\n" + // 4
		"# a comment line\n" + // 5
		"api /x --json '{\"a\": 1,\n" + // 6
		"  \"b\": 2}'\n" + // 7
		"sluice list \\\n" + // 8
		"  -o wide   # it's wide\n" + // 9
		"curl http://x/#frag\n" + // 10
		"```\n" + // 11
		"```yaml\n" + // 12
		"not: run\n" + // 13
		"```\n" + // 14
		"```\n" + // 15
		"sluice list   # a plain block is output, not commands\n" + // 16
		"```\n" // 17
	got, err := Blocks(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{
		{Line: 3, Text: "make build   # bin/sluice"},
		{Line: 6, Text: "api /x --json '{\"a\": 1,\n  \"b\": 2}'"},
		{Line: 8, Text: "sluice list \\\n  -o wide   # it's wide"},
		{Line: 10, Text: "curl http://x/#frag"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestBlocksRefusesAnOpenQuote(t *testing.T) {
	if _, err := Blocks(strings.NewReader("```sh\necho 'open\n```\n")); err == nil {
		t.Error("a block ending inside a quoted string was accepted")
	}
	if _, err := Blocks(strings.NewReader("```sh\necho\n")); err == nil {
		t.Error("an unclosed block was accepted")
	}
}

func TestMentions(t *testing.T) {
	doc := "Run `sluice list -o wide` or `sluice health`, not `nft list`.\n```sh\nsluice flush\n```\n| `sluice backend drain web 10.0.1.3` |\n`sluice-lab up --balancers 3`, not `sluicectl x`\n"
	got, err := Mentions(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{{1, "sluice list -o wide"}, {1, "sluice health"}, {5, "sluice backend drain web 10.0.1.3"}, {6, "sluice-lab up --balancers 3"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestInvocations(t *testing.T) {
	line := `make build && sudo bin/sluice-lab bench net --json - | jq . ; sluice --netns sluice-lb list -o wide # sluice flush`
	for _, tc := range []struct {
		name string
		want [][]string
	}{
		{"sluice", [][]string{{"--netns", "sluice-lb", "list", "-o", "wide"}}},
		{"sluice-lab", [][]string{{"bench", "net", "--json", "-"}}},
	} {
		if got := Invocations(line, tc.name); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Invocations(%q): got %q, want %q", tc.name, got, tc.want)
		}
	}
}
