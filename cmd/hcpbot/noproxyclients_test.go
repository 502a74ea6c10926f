package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// bot.noProxyClients and bot.routes[].noProxyClients at runtime: `hcpbot
// bot` judges each hosted cluster by its families. Two clusters get the
// same proxy edit: a proxy is added whose noProxy protects the service
// network 10.0.0.0/18 by CIDR, which Go, curl and requests honour and
// urllib ignores. Globally the families are [go, curl, requests]; a
// channel-less route gives namespace np-ansible the default four, urllib
// among them. Only np-ansible gets the risky-proxy-change warning and a
// digest finding; np-web gets neither, and the route routes no incident.
func TestBotNoProxyClients(t *testing.T) {
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	opsAddr := freeAddr(t)
	const defCh, digestCh = "C0NPCDEF01", "C0NPCDIG01"
	logs := startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  groupWait: 0s
  noProxyClients: [go, curl, requests]
  routes:
    - match: {namespace: np-ansible}
      noProxyClients: [go, curl, requests, urllib]
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
digests:
  - name: npc
    schedule: "*/2 * * * * *"
    channel: %s
`, srv.ClientURL(), freeAddr(t), opsAddr, defCh, rec.APIURL(), digestCh),
		map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-npclients", "TEST_SLACK_SIGNING_SECRET": "test-signing-secret-npc"})
	waitReady(t, opsAddr)

	now := time.Now()
	var events []event.Event
	for _, ns := range []string{"np-web", "np-ansible"} {
		events = append(events, proxyAddedEvents(t, "mgmt-npc", event.ClusterRef{Namespace: ns, Name: "hc"}, now)...)
	}
	conn, err := bus.Connect(context.Background(), bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := scenario.Publish(context.Background(), conn.JS, events); err != nil {
		t.Fatal(err)
	}

	mentions := func(r *slackrec.Recorder, ch, s string) bool {
		for _, m := range r.Messages(ch) {
			if strings.Contains(m.Text+string(m.Blocks), s) {
				return true
			}
		}
		return false
	}
	// The warning, and a digest naming the CIDR urllib ignores.
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		return mentions(r, defCh, "np-ansible/hc") && mentions(r, digestCh, "10.0.0.0/18")
	})
	if !mentions(rec, defCh, "urllib") {
		t.Errorf("the warning does not name urllib: %+v", rootsIn(rec, defCh))
	}
	if mentions(rec, defCh, "np-web") {
		t.Errorf("np-web (go, curl, requests) got a warning: %+v", rootsIn(rec, defCh))
	}
	for _, m := range rec.Messages(digestCh) {
		if strings.Contains(m.Text+string(m.Blocks), "np-web") && strings.Contains(m.Text+string(m.Blocks), "10.0.0.0/18") {
			t.Errorf("the digest flags np-web: %s", m.Text)
		}
	}
	if t.Failed() {
		t.Logf("bot log:\n%s", logs.String())
	}
}

// proxyAddedEvents: a HostedCluster without a proxy whose service network
// is 10.0.0.0/18, then the edit that adds a proxy with that CIDR (and the
// usual names) in noProxy, then the state it leaves. HyperShift's kube-apiserver-proxy bypasses the
// proxy for it (an entry equals the service network).
func proxyAddedEvents(t *testing.T, source string, ref event.ClusterRef, at time.Time) []event.Event {
	t.Helper()
	obj := event.ObjectRef{Kind: "HostedCluster", Namespace: ref.Namespace, Name: ref.Name, UID: "uid-" + ref.Namespace}
	hc := event.HostedClusterState{Platform: "KubeVirt", InfraID: ref.Name + "-x1", Version: "4.18.12", NetworkType: "OVNKubernetes",
		ServiceNetwork: []string{"10.0.0.0/18"}}
	e1, err := event.New(source, &ref, obj, hc, "rv:1", at)
	if err != nil {
		t.Fatal(err)
	}
	spec := event.ProxySpec{HTTPProxy: "http://proxy.corp.example:3128", HTTPSProxy: "http://proxy.corp.example:3128",
		NoProxy: "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,10.0.0.0/18"}
	e2, err := event.New(source, &ref, obj, event.ProxyChange{Target: event.ProxyTargetHostedCluster, New: spec}, "chg:1", at.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	hc.Proxy = spec // the state the edit leaves, which the digest reads
	e3, err := event.New(source, &ref, obj, hc, "rv:2", at.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return []event.Event{e1, e2, e3}
}
