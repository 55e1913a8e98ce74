package cli

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/api"
)

// TestNamespaceFromEnvironment checks that $SLUICE_NETNS points the balancer's commands at a
// namespace and its daemon's socket, in the process that re-executed inside it too (its --netns
// is gone then), and leaves the commands that touch no namespace alone.
func TestNamespaceFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, env, entered string
		args               []string
		netns, socket      string
	}{
		{name: "flag", args: []string{"--netns", "lb1", "list"}, netns: "lb1", socket: api.NetnsSocket("lb1")},
		{name: "environment", env: "lb2", args: []string{"list"}, netns: "lb2", socket: api.NetnsSocket("lb2")},
		{name: "re-executed", env: "lb2", entered: "lb2", args: []string{"backend", "list", "web"}, netns: "lb2", socket: api.NetnsSocket("lb2")},
		{name: "flag over environment", env: "lb2", args: []string{"--netns", "lb3", "health"}, netns: "lb3", socket: api.NetnsSocket("lb3")},
		{name: "validate ignores the environment", env: "lb2", args: []string{"validate", "-f", "x.yaml"}, socket: api.DefaultSocket},
		{name: "no namespace", args: []string{"list"}, socket: api.DefaultSocket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(netnsEnv, tc.env)
			t.Setenv(enteredEnv, tc.entered)
			t.Setenv("SLUICE_SOCKET", "")
			root, g := rootCmdWith()
			cmd, rest, err := root.Find(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Fatal(err)
			}
			g.chooseNamespace(cmd)
			if g.netns != tc.netns || g.socket != tc.socket {
				t.Errorf("netns %q socket %q, want %q and %q", g.netns, g.socket, tc.netns, tc.socket)
			}
		})
	}
}

// TestAPIURL checks that --api takes the http(s) URL of a daemon and refuses anything else,
// naming the flag, before a request is sent.
func TestAPIURL(t *testing.T) {
	for text, want := range map[string]string{
		"http://127.0.0.1:9090":       "",
		"https://lb1.example:9090/":   "",
		"127.0.0.1:9090":              `--api "127.0.0.1:9090" is not an http:// or https:// URL`,
		"ftp://127.0.0.1":             `--api "ftp://127.0.0.1" is not an http:// or https:// URL`,
		"http://":                     `--api "http://" is not an http:// or https:// URL`,
		"http://[::1":                 `--api "http://[::1": missing ']' in host`,
		"http://127.0.0.1:9090/?a=1":  "without a query, a fragment or a user",
		"http://me:pw@127.0.0.1:9090": "without a query, a fragment or a user",
	} {
		err := checkAPIURL(text)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", text, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error with %q", text, err, want)
		}
	}
}
