package fleet_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/fleet"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

const (
	approver1, approver2, stranger = "U0APPROVER1", "U0APPROVER2", "U0STRANGER"
)

// seedIncident feeds b seed 000 on cluster clusters/kv of source: the
// HostedCluster behind the proxy with the seed's noProxy
// (scenario.BehindProxy, HyperShift's defaults for the networks), two
// hosted nodes NotReady and service-ca-operator crashlooping with the
// seed's message; it returns the incident, whose diagnosis carries the
// noProxy fix.
func seedIncident(t *testing.T, b *bot.Bot, source string) bot.Incident {
	t.Helper()
	ref := event.ClusterRef{Namespace: "clusters", Name: "kv"}
	c := scenario.BehindProxy(ref.Namespace, ref.Name)
	hc := event.HostedClusterState{Platform: "KubeVirt", InfraID: c.InfraID, Version: "4.18.12",
		Proxy:       event.ProxySpec{HTTPProxy: c.HTTPProxy, HTTPSProxy: c.HTTPSProxy, NoProxy: c.NoProxy, TrustedCA: c.TrustedCA},
		NetworkType: "OVNKubernetes", ClusterNetwork: []string{"10.132.0.0/14"}, ServiceNetwork: []string{"172.31.0.0/16"},
		MachineNetwork: []string{"192.168.201.0/24"}}
	var events []event.Event
	add := func(e event.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	add(event.New(source, &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: ref.Namespace, Name: ref.Name, UID: "uid-kv"}, hc, "rv:1", at))
	for i := range 2 {
		node := fmt.Sprintf("kv-np-%d", i)
		add(event.New(source, &ref, event.ObjectRef{Kind: "Node", Name: node, UID: "uid-" + node, Hosted: true},
			event.NodeReadiness{Node: node, Ready: event.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: at},
			event.TransitionAt("Ready=Unknown", at), at))
	}
	pod := "service-ca-operator-6d5f7b9c4-x2x9z"
	add(event.New(source, &ref, event.ObjectRef{Kind: "Pod", Namespace: "openshift-service-ca-operator", Name: pod, UID: "uid-sca", Hosted: true},
		event.PodCrashLoop{Namespace: "openshift-service-ca-operator", Pod: pod, Container: "service-ca-operator", RestartCount: 7,
			WaitingReason: "CrashLoopBackOff", LastTerminationMessage: scenario.SeedConnectivityMessage, ExitCode: 255, FinishedAt: at},
		"crashloop:service-ca-operator:7", at))
	for _, e := range events {
		data, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Handle(t.Context(), data)
	}
	for _, inc := range b.Incidents() {
		if inc.Open() && inc.Cluster.Cluster == ref {
			for _, d := range inc.Diagnoses {
				if d.Fix != nil && d.Fix.Kind == "noproxy" {
					return inc
				}
			}
		}
	}
	t.Fatalf("no seed incident with a noProxy fix: %+v", b.Incidents())
	return bot.Incident{}
}

// changes is an approval flow (four-eyes, two approvers) on the fixture's
// NATS, as a replica of the bot has it.
func (f *fixture) changes(t *testing.T) *command.Changes {
	t.Helper()
	conn := f.connect(bus.BotRole())
	trail, err := audit.Open(t.Context(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	flow, err := approval.NewFlow(t.Context(), conn.JS, approval.Config{Signer: f.signer, Trail: trail, Log: natstest.Logger(t),
		Policy: approval.Policy{Approvers: []string{approver1, approver2}, FourEyes: true}})
	if err != nil {
		t.Fatal(err)
	}
	return &command.Changes{Flow: flow, Audit: trail, Log: natstest.Logger(t)}
}

func press(h *command.Handler, user, value string) string {
	return h.HandleAction(context.Background(), chatops.ActionRequest{Origin: chatops.Origin{UserID: user, ChannelID: "C0INCIDENTS"},
		ActionID: blockkit.ActionApprove, Value: value}).Text
}

// The Approve button of an incident of group 1, pressed on a replica of
// group 0 (Slack delivers the press to any replica): the incident, its
// cluster and its fix come from group 1 through the fleet.
//
//   - Attacker 3, a Slack user who is no approver, presses it: refused
//     as on the local path, nothing proposed.
//   - Four-eyes still holds: the first approver's press is one approval
//     of two, its second press counts nothing, the second approver's
//     press (on group 1's own replica) approves the same proposal, for
//     the incident's very cluster and management cluster.
//   - Attacker 1, the bot's NATS seed: with group 1 down, a rogue answers
//     for it with an unsealed incident of the same key on another
//     cluster, with its own fix; an approver's press proposes nothing
//     and the reply names group 1 as not answering.
func TestI30AttackApproveButtonThroughTheFleet(t *testing.T) {
	f := newFixture(t, 4)
	inc := seedIncident(t, f.bots[1], source(1))
	if f.set.Of(inc.Cluster.Source) != 1 {
		t.Fatalf("the incident's cluster is in group %d", f.set.Of(inc.Cluster.Source))
	}
	changes := f.changes(t)
	h0 := &command.Handler{Bot: f.client(0, 10*time.Second), Changes: changes}
	h1 := &command.Handler{Bot: f.bots[1], Changes: changes}
	if got := press(h0, stranger, inc.Key); !strings.Contains(got, "not allowed") || proposalID.MatchString(got) {
		t.Errorf("a non-approver's press through the fleet:\n%s", got)
	}
	first := press(h0, approver1, inc.Key)
	fixID := proposalID.FindString(first)
	if !strings.Contains(first, "1 of 2") || fixID == "" {
		t.Fatalf("the first approver's press through the fleet:\n%s", first)
	}
	if got := press(h0, approver1, inc.Key); !strings.Contains(got, "already approved") {
		t.Errorf("the first approver's second press:\n%s", got)
	}
	p, err := changes.Flow.Get(t.Context(), fixID)
	if err != nil {
		t.Fatal(err)
	}
	// Proposed by the first approver (the stranger's press proposed
	// nothing), for the incident's very cluster.
	if p.State != approval.StatePending || p.RequestedBy != approver1 || p.Source != inc.Cluster.Source || p.Change.Cluster.Name != inc.Cluster.Cluster.Name || p.Change.Cluster.Namespace != inc.Cluster.Cluster.Namespace {
		t.Fatalf("proposal after one approval: %s %s %+v, want pending for %s", p.State, p.Source, p.Change.Cluster, inc.Cluster)
	}
	if got := press(h1, approver2, inc.Key); strings.Contains(got, "1 of 2") || strings.Contains(got, "not allowed") {
		t.Errorf("the second approver's press:\n%s", got)
	}
	// Approved by the second approver; the first is its requester (the
	// four-eyes reading: the requester's approval is the first one).
	if p, err = changes.Flow.Get(t.Context(), fixID); err != nil || p.State != approval.StateApproved || p.RequestedBy != approver1 || !slices.Equal(p.Approvers, []string{approver2}) {
		t.Errorf("proposal after two approvals: %s requested by %s, approvers %v (%v)", p.State, p.RequestedBy, p.Approvers, err)
	}

	// Attacker 1: group 1 down, a rogue answers every request for it
	// with the incident's key on cluster 3 of mgmt-3 and its own fix.
	f.servers[1].Stop()
	lie := forgedIncident(t, inc.Key, key(3))
	f.rogue(t, func(_ *nats.Conn, request []byte) [][]byte {
		h := wire.Header{Count: 2, Group: 1, Request: wire.RequestDigest(request), Replica: "rogue", Answer: hexSum(lie), Total: 1, Sum: hexSum(lie)}
		msg, _ := wire.Marshal(wire.Chunk{Header: h, Data: lie})
		return [][]byte{msg}
	})
	hShort := &command.Handler{Bot: f.client(0, time.Second), Changes: changes}
	got := press(hShort, approver1, inc.Key)
	if !strings.Contains(got, "group 1 of 2 did not answer") || strings.Contains(got, "FORGED") || strings.Contains(got, key(3).Cluster.Name) {
		t.Errorf("an approver's press while a rogue answers for group 1:\n%s", got)
	}
	t.Logf("the press while a rogue answers for group 1:\n%s", got)
	if id := proposalID.FindString(got); id != "" {
		t.Errorf("a proposal %s from the rogue's answer", id)
	}
}

var forgedFix = &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/FORGED", Before: "", Add: []string{"FORGED.attacker.example"}, Diff: "FORGED"}

// forgedIncident is an answer holding an open incident of key on cluster
// k, with the attacker's fix.
func forgedIncident(t *testing.T, key string, k diagnose.Key) []byte {
	t.Helper()
	d := diagnose.Diagnosis{Rule: diagnose.RuleProxyTunnel, Severity: diagnose.SeverityCritical, Title: "FORGED", Fix: forgedFix}
	data, err := fleet.Encode(fleet.Answer{Clusters: []diagnose.Key{k}, Known: true, Diagnoses: []diagnose.Diagnosis{d},
		Incidents: []bot.Incident{{Key: key, Cluster: k, Opened: at, Diagnoses: []diagnose.Diagnosis{d}}}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// proposalID finds the id of a diagnosed fix's proposal in a reply.
var proposalID = regexp.MustCompile(`fix-[a-z2-7]{16}`)
