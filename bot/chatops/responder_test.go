package chatops

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

func TestResponderAllowed(t *testing.T) {
	r, err := NewResponder("", nil)
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]bool{
		"https://hooks.slack.com/commands/T0HCPBOT/123/abc":      true,
		"https://hooks.slack.com/actions/T0HCPBOT/123/abc":       true,
		"https://HOOKS.slack.com/actions/T/1/x":                  true,
		"http://hooks.slack.com/actions/T/1/x":                   false,
		"https://hooks.slack.com.attacker.example/actions/T/1/x": false,
		"https://attacker.example/https://hooks.slack.com/":      false,
		"https://user:pw@hooks.slack.com/actions/T/1/x":          false,
		"https://hooks.slack.com@attacker.example/x":             false,
		"https://hooks.slack.com:8443/actions/T/1/x":             false,
		"https://hooks.slack.com/../x":                           false,
		"//hooks.slack.com/actions/T/1/x":                        false,
		"hooks.slack.com/actions":                                false,
		"https://hooks.slack.com\\@attacker.example/":            false,
		"":                             false,
		"https://hooks.slack.com/a\nb": false,
		"file:///etc/passwd":           false,
	} {
		if got := r.Allowed(u); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", u, got, want)
		}
	}
	for _, bad := range []string{"ftp://x/", "https://", "https://u@x/", "https://x/?q=1", "::"} {
		if _, err := NewResponder(bad, nil); err == nil {
			t.Errorf("NewResponder(%q) accepted", bad)
		}
	}
}

func TestResponderPostLimits(t *testing.T) {
	rec := slackrec.New(t)
	r, err := NewResponder(rec.APIURL()+"response/", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	u := rec.ResponseURL("C0OPS")
	for i := range 5 {
		if err := r.Post(ctx, u, Reply{Text: "update"}); err != nil {
			t.Fatalf("post %d: %v", i+1, err)
		}
	}
	if err := r.Post(ctx, u, Reply{Text: "one too many"}); !errors.Is(err, ErrResponseURLUsedUp) {
		t.Errorf("6th post: %v", err)
	}
	if n := len(rec.CallsTo(slackrec.MethodResponseURL)); n != 5 {
		t.Errorf("%d posts reached Slack", n)
	}
	if err := r.Post(ctx, u, Reply{}); err != nil {
		t.Errorf("zero reply: %v", err)
	}
	if err := r.Post(ctx, "https://hooks.slack.com/actions/T/1/x", Reply{Text: "x"}); !errors.Is(err, ErrResponseURLNotAllowed) {
		t.Errorf("outside the prefix: %v", err)
	}
	// Failures say the status, not the URL.
	rec.FailFor(slackrec.FailServerError, 1<<40)
	err = r.Post(ctx, rec.ResponseURL("C0OPS"), Reply{Text: "x"})
	if err == nil || !strings.Contains(err.Error(), "500") || strings.Contains(err.Error(), "/response/") {
		t.Errorf("server error: %v", err)
	}
}

func TestResponderDoesNotFollowRedirects(t *testing.T) {
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	r, err := NewResponder(redirector.URL+"/hooks/", &http.Client{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Post(context.Background(), redirector.URL+"/hooks/x", Reply{Text: "x"}); err == nil {
		t.Error("a redirect counted as delivered")
	}
	if elsewhere.Load() != 0 {
		t.Error("followed the redirect")
	}
	// Unreachable: the error must not carry the URL (a credential).
	r, _ = NewResponder("http://127.0.0.1:1/hooks/", nil)
	if err := r.Post(context.Background(), "http://127.0.0.1:1/hooks/secret-token", Reply{Text: "x"}); err == nil || strings.Contains(err.Error(), "secret-token") {
		t.Errorf("unreachable: %v", err)
	}
}

// With a Slack-compatible API elsewhere, its response_urls and Slack's own
// hooks host are both allowed; nothing else, and no tricks with them.
func TestResponderForTwoPrefixes(t *testing.T) {
	r, err := NewResponderFor(nil, DefaultResponseURLPrefix, "https://slack.corp.example/")
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]bool{
		"https://hooks.slack.com/commands/T0/1/abc":          true,
		"https://slack.corp.example/commands/T0/1/abc":       true,
		"https://HOOKS.slack.com/actions/T0/1/abc":           true,
		"http://hooks.slack.com/commands/T0/1/abc":           false,
		"https://hooks.slack.com.evil.example/commands/T0/1": false,
		"https://user@hooks.slack.com/commands/T0/1/abc":     false,
		"https://hooks.slack.com/commands/../../x":           false,
		"https://evil.example/commands/T0/1/abc":             false,
	} {
		if got := r.Allowed(u); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", u, got, want)
		}
	}
	if _, err := NewResponderFor(nil, "ftp://x/"); err == nil {
		t.Error("an ftp prefix was accepted")
	}
}
