package main

import (
	"slices"
	"testing"

	"github.com/hcpbot/hcpbot/bot/chatops"
)

// Real Slack's response_urls are on hooks.slack.com whatever slack.apiURL
// says; a Slack-compatible API elsewhere adds its own host.
func TestResponseURLPrefixes(t *testing.T) {
	for api, want := range map[string][]string{
		"https://slack.com/api/":             {chatops.DefaultResponseURLPrefix},
		"":                                   {chatops.DefaultResponseURLPrefix},
		"https://slack-gw.corp.example/api/": {chatops.DefaultResponseURLPrefix, "https://slack-gw.corp.example/"},
	} {
		if got := responseURLPrefixes(api); !slices.Equal(got, want) {
			t.Errorf("responseURLPrefixes(%q) = %v, want %v", api, got, want)
		}
	}
}
