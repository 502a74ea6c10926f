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

// Routing end to end: `hcpbot bot` sends each incident to the channel of
// the first route matching what the incident is — its kind (the rule of
// its main diagnosis), its source, its hosted cluster's namespace and name,
// its labels — and the others to bot.defaultChannel. Every incident here
// has NotReady nodes, but only the one whose main diagnosis is
// nodes-notready is routed by kind: the seed 000 clusters are
// proxy-tunnel incidents.
func TestBotRoutesByIncident(t *testing.T) {
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	opsAddr := freeAddr(t)
	const (
		kindCh, sourceCh, nsCh, clusterCh, selCh, defCh = "C0RTKIND01", "C0RTSRC001", "C0RTNS0001", "C0RTCLUS01", "C0RTSEL001", "C0RTDEF001"
	)
	startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  groupWait: 0s
  routes:
    - match: {kind: nodes-notready}
      channel: %s
    - match: {source: mgmt-rt-b}
      channel: %s
    - match: {namespace: rt-ns}
      channel: %s
    - match: {cluster: hc-1, kind: proxy-tunnel}
      channel: %s
    - selector: "env=prod"
      channel: %s
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
`, srv.ClientURL(), freeAddr(t), opsAddr, kindCh, sourceCh, nsCh, clusterCh, selCh, defCh, rec.APIURL()),
		map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-routes", "TEST_SLACK_SIGNING_SECRET": "test-signing-secret-routes"})
	waitReady(t, opsAddr)

	now := time.Now()
	var events []event.Event
	storm := func(source, ns string, n int, opts ...scenario.StormOption) {
		t.Helper()
		es, err := scenario.Storm(source, ns, n, 1, now, opts...)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, es...)
	}
	storm("mgmt-rt", "rt-a", 2)   // rt-a/hc-0 → default, rt-a/hc-1 → cluster route
	storm("mgmt-rt-b", "rt-b", 1) // → source route
	storm("mgmt-rt", "rt-ns", 1)  // → namespace route
	storm("mgmt-rt", "rt-sel", 1, scenario.StormLabels(func(int) map[string]string { return map[string]string{"env": "prod"} }))
	events = append(events, nodesNotReadyEvents(t, "mgmt-rt", event.ClusterRef{Namespace: "rt-a", Name: "hc-nodes"}, now)...)

	conn, err := bus.Connect(context.Background(), bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := scenario.Publish(context.Background(), conn.JS, events); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{kindCh: "rt-a/hc-nodes", sourceCh: "rt-b/hc-0", nsCh: "rt-ns/hc-0", clusterCh: "rt-a/hc-1", selCh: "rt-sel/hc-0", defCh: "rt-a/hc-0"}
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for ch := range want {
			if len(rootsIn(r, ch)) == 0 {
				return false
			}
		}
		return true
	})
	for ch, cluster := range want {
		ms := rootsIn(rec, ch) // the incident's message; its thread holds the reasoning
		if len(ms) != 1 || !strings.Contains(ms[0].Text, cluster) {
			var texts []string
			for _, m := range ms {
				texts = append(texts, m.Text)
			}
			t.Errorf("channel %s: %d messages %q, want one about %s", ch, len(ms), texts, cluster)
		}
	}
}

// nodesNotReadyEvents are a hosted cluster without a proxy and one
// NotReady node: an incident of kind nodes-notready.
func nodesNotReadyEvents(t *testing.T, source string, ref event.ClusterRef, at time.Time) []event.Event {
	t.Helper()
	hc := event.HostedClusterState{Platform: "KubeVirt", InfraID: ref.Name + "-x1", Version: "4.18.12", NetworkType: "OVNKubernetes",
		ClusterNetwork: []string{"10.132.0.0/14"}, ServiceNetwork: []string{"172.31.0.0/16"}}
	e1, err := event.New(source, &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: ref.Namespace, Name: ref.Name, UID: "uid-" + ref.Name}, hc, "rv:1", at)
	if err != nil {
		t.Fatal(err)
	}
	node := ref.Name + "-np-0"
	nr := event.NodeReadiness{Node: node, Ready: event.ConditionFalse, Reason: "KubeletNotReady", Message: "container runtime is down", LastTransitionTime: at}
	e2, err := event.New(source, &ref, event.ObjectRef{Kind: "Node", Name: node, UID: "uid-" + node, Hosted: true}, nr, event.TransitionAt("Ready=False", at), at)
	if err != nil {
		t.Fatal(err)
	}
	return []event.Event{e1, e2}
}
