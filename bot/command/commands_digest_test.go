package command_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// commandsWith returns Commands over a bot that saw one HostedCluster.
func commandsWith(t *testing.T, spec event.ProxySpec) *command.Handler {
	t.Helper()
	b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
	ref := event.ClusterRef{Namespace: "clusters", Name: "web"}
	e, err := event.New("mgmt-1", &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "web", UID: "u1"},
		event.HostedClusterState{Platform: "KubeVirt", Proxy: spec, ServiceNetwork: []string{"172.31.0.0/16"}, ClusterNetwork: []string{"10.132.0.0/14"}},
		"hc", time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	data, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	b.Handle(context.Background(), data)
	return &command.Handler{Bot: b}
}

func TestNoProxyCheck(t *testing.T) {
	c := commandsWith(t, event.ProxySpec{
		HTTPProxy: "http://proxy.corp.example:3128", HTTPSProxy: "http://user:s3cr3t@proxy.corp.example:3128",
		NoProxy: ".corp.example,kubernetes,*.svc",
	})
	ref := chatops.ClusterRef{Namespace: "clusters", Name: "web"}
	check := func(host string, port int32) string {
		return c.HandleCommand(context.Background(), chatops.Request{Command: chatops.NoProxyCheck{Cluster: ref, Host: host, Port: port}}).Text
	}
	got := check("git.corp.example", 8443)
	for _, want := range []string{"https://git.corp.example:8443", "http://git.corp.example:8443", "go: *direct*", "curl: *direct*", "python: *direct*",
		"urllib: *direct*", "wget: *direct*", "node: *direct*"} {
		if !strings.Contains(got, want) {
			t.Errorf("answer lacks %q:\n%s", want, got)
		}
	}
	t.Logf("answer:\n%s", got)
	got = check("api.example.com", 0)
	if !strings.Contains(got, "https://api.example.com:443") || !strings.Contains(got, "go: *proxy*") {
		t.Errorf("external host:\n%s", got)
	}
	if strings.Contains(got, "s3cr3t") {
		t.Errorf("answer carries the proxy password:\n%s", got)
	}
	if got := c.HandleCommand(context.Background(), chatops.Request{Command: chatops.NoProxyCheck{Cluster: chatops.ClusterRef{Namespace: "x", Name: "y"}, Host: "a"}}).Text; !strings.Contains(got, "Unknown cluster") {
		t.Errorf("unknown cluster: %s", got)
	}
}

func TestNoProxyCheckWithoutHTTPProxy(t *testing.T) {
	c := commandsWith(t, event.ProxySpec{HTTPSProxy: "http://proxy.corp.example:3128", NoProxy: "kubernetes"})
	got := c.HandleCommand(context.Background(), chatops.Request{Command: chatops.NoProxyCheck{
		Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "web"}, Host: "10.0.0.1", Port: 80}}).Text
	if !strings.Contains(got, "no http proxy configured") {
		t.Errorf("answer:\n%s", got)
	}
}

type digester struct {
	text string
	err  error
}

func (d digester) DigestNow(context.Context) (string, error) { return d.text, d.err }

func TestDigestNowCommand(t *testing.T) {
	c := commandsWith(t, event.ProxySpec{})
	req := chatops.Request{Command: chatops.DigestNow{}}
	if got := c.HandleCommand(context.Background(), req).Text; !strings.Contains(got, "not available") {
		t.Errorf("without digester: %s", got)
	}
	c.Digester = digester{text: "Digest posted: daily to <#C0D>."}
	if got := c.HandleCommand(context.Background(), req).Text; got != "Digest posted: daily to <#C0D>." {
		t.Errorf("with digester: %s", got)
	}
	c.Digester = digester{err: errors.New("nats <down>")}
	if got := c.HandleCommand(context.Background(), req).Text; !strings.Contains(got, "could not be posted") || strings.Contains(got, "<down>") {
		t.Errorf("failing digester: %s", got)
	}
}
