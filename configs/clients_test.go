package configs

import (
	"slices"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/noproxy"
)

// TestNoProxyClients: bot.noProxyClients and bot.routes[].noProxyClients
// choose a cluster's families — the first matching route with the field,
// else the global list, else the default; a family-only route (no
// channel) routes no incident; unknown names, empty lists and a kind on
// such a route are refused at their line.
func TestNoProxyClients(t *testing.T) {
	c, err := Parse([]byte(botBase+`  noProxyClients: [go, curl, requests]
  routes:
    - match: {namespace: ansible}
      noProxyClients: [urllib, go, ansible]
    - selector: "team=web"
      noProxyClients: [node]
      channel: C0234567890
`), "bot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := c.Bot
	for _, tc := range []struct {
		inc  Incident
		want []noproxy.Client
	}{
		{Incident{Source: "m", Namespace: "clusters", Cluster: "a"}, []noproxy.Client{noproxy.Go, noproxy.Curl, noproxy.Python}},
		{Incident{Source: "m", Namespace: "ansible", Cluster: "a", Labels: map[string]string{"team": "web"}}, []noproxy.Client{noproxy.Urllib, noproxy.Go}},
		{Incident{Source: "m", Namespace: "clusters", Cluster: "a", Labels: map[string]string{"team": "web"}}, []noproxy.Client{noproxy.Node}},
	} {
		if got := b.Clients(tc.inc); !slices.Equal(got, tc.want) {
			t.Errorf("Clients(%+v) = %v, want %v", tc.inc, got, tc.want)
		}
	}
	if got := b.Channel(Incident{Source: "m", Namespace: "ansible", Cluster: "a"}); got != "C0123456789" {
		t.Errorf("a route without channel took an incident: %s", got)
	}
	d, err := Parse([]byte(botBase), "bot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Bot.Clients(Incident{Source: "m"}); !slices.Equal(got, noproxy.DefaultClients()) {
		t.Errorf("default families = %v, want %v", got, noproxy.DefaultClients())
	}

	for _, tc := range []struct{ yaml, want string }{
		{"  noProxyClients: [go, java]\n", `bot.yaml:6: bot.noProxyClients[1]: "java" is not a client family (known: go, curl, requests, urllib, wget, node)`},
		{"  noProxyClients: []\n", "bot.yaml:6: bot.noProxyClients: is empty"},
		{"  routes:\n    - match: {namespace: a}\n      noProxyClients: [jvm]\n      channel: C0234567890\n", `bot.yaml:8: bot.routes[0].noProxyClients[0]: "jvm" is not a client family`},
		{"  routes:\n    - match: {kind: proxy-tunnel}\n      noProxyClients: [go]\n", "bot.routes[0].match.kind: a route with noProxyClients applies to clusters"},
		{"  routes:\n    - match: {namespace: a}\n", "bot.routes[0]: channel is required (only a route with noProxyClients may leave it out)"},
	} {
		_, err := Parse([]byte(botBase+tc.yaml), "bot.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
