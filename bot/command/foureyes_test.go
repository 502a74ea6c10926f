package command_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

var (
	fixIDs = regexp.MustCompile(`fix-[a-z2-7]{16}`)
	anyID  = regexp.MustCompile(`(act|rbk|fix)-[a-z2-7]{16}`)
)

// clusterState is what an action could change: the HostedCluster (its
// resourceVersion moves on any write) and the Services actions label.
type clusterState struct {
	noProxy, rv string
	services    int
}

func (e *liveEnv) state(t *testing.T) clusterState {
	t.Helper()
	ctx := context.Background()
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(e.ns).Get(ctx, "kv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
	s := clusterState{noProxy: np, rv: u.GetResourceVersion()}
	sel := metav1.ListOptions{LabelSelector: actions.LabelActionID}
	hosted, err := e.hosted.Kube.CoreV1().Services(appNS).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	mgmt, err := env.Kube.CoreV1().Services(hypershift.ControlPlaneNamespace(e.ns, "kv")).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	s.services = len(hosted.Items) + len(mgmt.Items)
	return s
}

func (e *liveEnv) seedIncident(t *testing.T) bot.Incident {
	t.Helper()
	seedSymptoms(t, e.cmds.Bot.(*bot.Bot), e.source, e.ns, "kv")
	for _, i := range e.cmds.Bot.Incidents() {
		if i.Open() && i.Cluster.Cluster.Name == "kv" && len(i.Diagnoses) > 0 && i.Diagnoses[0].Fix != nil {
			return i
		}
	}
	t.Fatalf("no seed incident with a fix: %+v", e.cmds.Bot.Incidents())
	return bot.Incident{}
}

// Under four-eyes no single person can change a cluster, by any path: the
// incident's Approve button, a proposal's buttons, /hcp approve, a fix or
// an exposure they proposed themselves, a rollback. Each attempt by one
// approver leaves the HostedCluster and the Services as they were; then
// a second approver's press applies the fix, once; its rollback needs two
// people as well.
func TestFourEyesNoSinglePersonLive(t *testing.T) {
	e := newLiveEnv(t)
	inc := e.seedIncident(t)
	before := e.state(t)
	contains := func(subs ...string) func(string) bool {
		return func(s string) bool {
			for _, sub := range subs {
				if strings.Contains(s, sub) {
					return true
				}
			}
			return false
		}
	}
	press := func(user, action, value string, done func(string) bool) string {
		return e.slack.press(user, action, value, done).Form.Get("text")
	}
	var fixID, ownFix, ownExpose string
	const alone = approver1
	for _, step := range []struct {
		name string
		do   func() string
		want string
	}{
		{"incident Approve button", func() string {
			r := press(alone, chatops.ActionApprove, inc.Key, contains("1 of 2", "approved by"))
			fixID = fixIDs.FindString(r)
			return r
		}, "one more approver is needed"},
		{"incident Approve button again", func() string {
			return press(alone, chatops.ActionApprove, inc.Key, contains("already approved", "approved by"))
		}, "another approver has to approve"},
		{"the proposal's Approve button", func() string {
			return press(alone, chatops.ActionApprove, fixID, contains(fixID))
		}, "Four-eyes"},
		{"/hcp approve", func() string {
			return e.slack.command("approve "+fixID, alone, contains(fixID))
		}, "Four-eyes"},
		{"/hcp fix noproxy, then /hcp approve", func() string {
			r := e.slack.command("fix noproxy "+e.cluster, alone, func(s string) bool { return anyID.MatchString(s) })
			ownFix = anyID.FindString(r)
			return e.slack.command("approve "+ownFix, alone, contains(ownFix))
		}, "Four-eyes"},
		{"/hcp fix noproxy, then its Approve button", func() string {
			return press(alone, chatops.ActionApprove, ownFix, contains(ownFix))
		}, "Four-eyes"},
		{"/hcp expose, then its Approve button", func() string {
			r := e.slack.command("expose "+e.cluster+" "+appNS+"/petclinic 8080", alone, func(s string) bool { return anyID.MatchString(s) })
			ownExpose = anyID.FindString(r)
			return press(alone, chatops.ActionApprove, ownExpose, contains(ownExpose))
		}, "Four-eyes"},
		{"/hcp expose, then /hcp approve", func() string {
			return e.slack.command("approve "+ownExpose, alone, contains(ownExpose))
		}, "Four-eyes"},
	} {
		got := step.do()
		if !strings.Contains(got, step.want) {
			t.Errorf("%s: answered %q, want %q", step.name, got, step.want)
		}
		if now := e.state(t); now != before {
			t.Fatalf("%s by %s alone changed the cluster: %+v → %+v", step.name, alone, before, now)
		}
	}
	if fixID == "" || ownFix == "" || ownExpose == "" {
		t.Fatalf("ids: fix %q, own fix %q, own expose %q", fixID, ownFix, ownExpose)
	}
	if p, err := e.store.Get(context.Background(), fixID); err != nil || p.RequestedBy != alone || p.State != approval.StatePending {
		t.Fatalf("the first press's proposal: %+v, %v", p, err)
	}

	// The second person: the fix is applied, once.
	r := press(approver2, chatops.ActionApprove, inc.Key, contains("approved by", "not applied", "failed"))
	if !strings.Contains(r, "approved by <@"+approver2+">") || !strings.Contains(r, "and applied") {
		t.Fatalf("second approver: %q", r)
	}
	fixed := e.state(t)
	if !strings.Contains(fixed.noProxy, "kubernetes") || fixed.rv == before.rv {
		t.Fatalf("after two approvals noProxy = %q", fixed.noProxy)
	}
	executed := 0
	for _, rec := range recentAudit(t, e.log) {
		if rec.Kind == audit.KindExecuted && rec.ActionID == fixID {
			executed++
		}
	}
	if executed != 1 {
		t.Errorf("%d executions of %s audited, want 1", executed, fixID)
	}

	// A rollback is a change too.
	rb := rollbackIDs.FindString(e.slack.command("rollback "+fixID, alone, func(s string) bool { return rollbackIDs.MatchString(s) }))
	if got := e.slack.command("approve "+rb, alone, contains(rb)); !strings.Contains(got, "Four-eyes") {
		t.Errorf("rollback approved by its requester: %q", got)
	}
	if got := press(alone, chatops.ActionApprove, rb, contains(rb)); !strings.Contains(got, "Four-eyes") {
		t.Errorf("rollback button pressed by its requester: %q", got)
	}
	if now := e.state(t); now != fixed {
		t.Fatalf("a rollback by one person changed the cluster: %+v → %+v", fixed, now)
	}
	if got := e.slack.command("approve "+rb, approver2, contains(rb)); !strings.Contains(got, "is now rolled back") {
		t.Fatalf("two-person rollback: %q", got)
	}
	if now := e.state(t); now.noProxy != before.noProxy {
		t.Errorf("after the rollback noProxy = %q, want %q", now.noProxy, before.noProxy)
	}
}

func recentAudit(t *testing.T, l *audit.Log) []audit.Record {
	t.Helper()
	recs, err := l.Recent(context.Background(), 500)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// Requests put straight onto NATS, by whoever can publish there, reach
// the real agent (actions.Serve with the approval store on NATS KV and the
// executor on the real API server). Unsigned, wrongly signed, tampered
// after signing, for an unapproved, expired, rejected or already executed
// proposal, replayed with a fresh message id: each is refused with a
// coded answer (recorded under the message id), audited by the agent, and
// the cluster is unchanged.
func TestForgedActionRequestsLive(t *testing.T) {
	e := newLiveEnv(t)
	ctx := context.Background()
	acts := e.cmds.Changes
	subject, err := actions.RequestSubject(e.source)
	if err != nil {
		t.Fatal(err)
	}
	k := diagnose.Key{Source: e.source, Cluster: event.ClusterRef{Namespace: e.ns, Name: "kv"}}
	fix := func(add string) *diagnose.Fix {
		return &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/" + e.ns + "/kv", Before: scenario.SeedNoProxy, Add: []string{add}}
	}
	propose := func(add string) approval.Proposal {
		t.Helper()
		id := actionID.FindString(acts.ProposeNoProxy(ctx, k, fix(add), nil, requester).Text)
		p, err := e.store.Get(ctx, id)
		if err != nil {
			t.Fatalf("proposal %q: %v", id, err)
		}
		return p
	}
	// What a forger who somehow got hold of the bot's key would attach:
	// an approval by approver1 that the store does not hold.
	sealAs := func(s *actions.Signer, p approval.Proposal) []byte {
		t.Helper()
		p.DecidedBy, p.DecidedAt = approver1, time.Now().UTC()
		att, err := p.Attestation()
		if err != nil {
			t.Fatal(err)
		}
		data, err := s.Seal(p.Request, att, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	// A genuine two-person execution, its envelope captured off the wire
	// by a plain subscriber beside the agent's queue group.
	spy, err := e.botNC.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	genuine := propose("kubernetes")
	if r := acts.Approve(ctx, genuine.ID, approver1); !strings.Contains(r.Text, "and applied") {
		t.Fatalf("genuine approval: %q", r.Text)
	}
	wire, err := spy.NextMsg(natsWait)
	if err != nil {
		t.Fatalf("the genuine request was not seen: %v", err)
	}
	_ = spy.Unsubscribe()
	before := e.state(t)

	// The bot's side of the refusals: read from the agent's audit subject
	// and posted to Slack (the recorder).
	notifier, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", e.slack.rec.APIURL(), nil), Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	notices := &command.RefusalNotices{JS: e.botJS, Out: notifier, Channel: func(string) string { return opsChannel }, Log: natstest.Logger(t)}
	wg.Go(func() { _ = notifier.Run(runCtx) })
	wg.Go(func() {
		if err := notices.Run(runCtx); err != nil {
			t.Errorf("refusal notices: %v", err)
		}
	})

	expired := propose("expired.example")
	if _, err := e.store.Expire(ctx, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	pending := propose("pending.example")
	rejected := propose("rejected.example")
	if _, err := e.store.Reject(ctx, rejected.ID, approver2, "no", time.Now()); err != nil {
		t.Fatal(err)
	}
	other, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := json.Marshal(pending.Request)
	if err != nil {
		t.Fatal(err)
	}
	var env actions.Envelope
	if err := json.Unmarshal(wire.Data, &env); err != nil {
		t.Fatal(err)
	}
	tampered := env
	tampered.Payload = []byte(strings.Replace(string(env.Payload), `"kubernetes"`, `"kubernetez"`, 1))
	tamperedData, err := json.Marshal(tampered)
	if err != nil {
		t.Fatal(err)
	}

	for i, tc := range []struct {
		name string
		data []byte
		code actions.Code
	}{
		{"not an envelope", plain, actions.CodeInvalid},
		{"unsigned", []byte(`{}`), actions.CodeUnauthorized},
		{"signed by another key", sealAs(other, pending), actions.CodeUnauthorized},
		{"tampered after signing", tamperedData, actions.CodeUnauthorized},
		{"unapproved proposal", sealAs(e.signer, pending), actions.CodeUnauthorized},
		{"expired proposal", sealAs(e.signer, expired), actions.CodeUnauthorized},
		{"rejected proposal", sealAs(e.signer, rejected), actions.CodeUnauthorized},
		{"already executed, replayed", wire.Data, actions.CodeUnauthorized},
	} {
		auditedBefore := agentRefusals(t, e.log)
		// Queued like the bot's requests, under a fresh message id, as a
		// replay through JetStream would carry; the answer is recorded
		// under it.
		msgID := fmt.Sprintf("replay-%04d", i)
		wctx, cancel := context.WithTimeout(ctx, natsWait)
		if err := e.queue.Send(wctx, e.source, msgID, tc.data); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		reply, err := e.queue.Wait(wctx, e.source, msgID)
		cancel()
		if err != nil {
			t.Fatalf("%s: no answer: %v", tc.name, err)
		}
		if reply.Code != tc.code || reply.Result != nil {
			t.Errorf("%s: reply %+v, want code %s", tc.name, reply, tc.code)
		}
		if tc.code == actions.CodeUnauthorized && !errors.Is(reply.Err(), actions.ErrUnauthorized) {
			t.Errorf("%s: %v does not wrap ErrUnauthorized", tc.name, reply.Err())
		}
		testenv.Eventually(t, natsWait, tc.name+": refusal audited", func() bool { return agentRefusals(t, e.log) == auditedBefore+1 })
		if now := e.state(t); now != before {
			t.Fatalf("%s changed the cluster: %+v → %+v", tc.name, before, now)
		}
	}
	// Slack shows each refusal: one message for the agent, updated with the
	// count, a thread reply per refusal.
	wants := []string{"unsigned", "untrusted key", "bad signature", "is not approved", "is expired", "is rejected", "a replay"}
	shown := func(r *slackrec.Recorder) (root slackrec.Message, missing []string) {
		for _, m := range r.Messages(opsChannel) {
			if m.ThreadTS != "" || !strings.Contains(m.Text, "refused") || !strings.Contains(m.Text, e.source) {
				continue
			}
			replies := r.Thread(opsChannel, m.TS)[1:]
			if !strings.Contains(m.Text, fmt.Sprintf("refused %d action requests", len(replies))) {
				return m, []string{"a count equal to the replies"}
			}
			for _, want := range wants {
				if !slices.ContainsFunc(replies, func(m slackrec.Message) bool { return strings.Contains(m.Text, want) }) {
					missing = append(missing, want)
				}
			}
			return m, missing
		}
		return slackrec.Message{}, []string{"the message"}
	}
	e.slack.rec.WaitFor(t, natsWait, func(r *slackrec.Recorder) bool {
		_, missing := shown(r)
		return len(missing) == 0
	})
	if root, _ := shown(e.slack.rec); !strings.Contains(root.Text, "Nothing was changed") {
		t.Errorf("refusal notice: %q", root.Text)
	}
	for _, p := range []approval.Proposal{pending, expired, rejected} {
		got, err := e.store.Get(ctx, p.ID)
		if err != nil || got.State == approval.StateExecuted || got.State == approval.StateApproved {
			t.Errorf("%s is %s after the forgeries (%v)", p.ID, got.State, err)
		}
	}
}

// natsWait bounds one NATS round trip of these tests on a busy machine.
const natsWait = 30 * time.Second

func agentRefusals(t *testing.T, l *audit.Log) int {
	t.Helper()
	n := 0
	for _, r := range recentAudit(t, l) {
		if r.Kind == audit.KindRefused && strings.HasPrefix(r.Summary, audit.RefusedByAgent) {
			n++
		}
	}
	return n
}
