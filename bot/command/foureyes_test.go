package command_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
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
// an exposure they proposed themselves, a rollback. After each attempt by
// one approver every proposal made so far is still pending (so nothing
// was, or will be, sent to the agent) and the HostedCluster and the
// Services are as they were; then a second approver's press is answered
// at once and applies the fix, once; its rollback needs two people as
// well.
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
	unchanged := func(what string, want clusterState) {
		t.Helper()
		for _, id := range []string{fixID, ownFix, ownExpose} {
			if id != "" && stateOf(t, e.flow, id) != approval.StatePending {
				t.Fatalf("%s by %s alone: %s is %s", what, alone, id, stateOf(t, e.flow, id))
			}
		}
		if now := e.state(t); now != want {
			t.Fatalf("%s by %s alone changed the cluster: %+v → %+v", what, alone, want, now)
		}
	}
	for _, step := range []struct {
		name string
		do   func() string
		want string
	}{
		{"incident Approve button", func() string {
			r := press(alone, blockkit.ActionApprove, inc.Key, contains("1 of 2", "approved by"))
			fixID = fixIDs.FindString(r)
			return r
		}, "one more approver is needed"},
		{"incident Approve button again", func() string {
			return press(alone, blockkit.ActionApprove, inc.Key, contains("already approved", "approved by"))
		}, "another approver has to approve"},
		{"the proposal's Approve button", func() string {
			return press(alone, blockkit.ActionApprove, fixID, contains(fixID))
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
			return press(alone, blockkit.ActionApprove, ownFix, contains(ownFix))
		}, "Four-eyes"},
		{"/hcp expose, then its Approve button", func() string {
			r := e.slack.command("expose "+e.cluster+" "+appNS+"/petclinic 8080", alone, func(s string) bool { return anyID.MatchString(s) })
			ownExpose = anyID.FindString(r)
			return press(alone, blockkit.ActionApprove, ownExpose, contains(ownExpose))
		}, "Four-eyes"},
		{"/hcp expose, then /hcp approve", func() string {
			return e.slack.command("approve "+ownExpose, alone, contains(ownExpose))
		}, "Four-eyes"},
	} {
		got := step.do()
		if !strings.Contains(got, step.want) {
			t.Errorf("%s: answered %q, want %q", step.name, got, step.want)
		}
		unchanged(step.name, before)
	}
	if fixID == "" || ownFix == "" || ownExpose == "" {
		t.Fatalf("ids: fix %q, own fix %q, own expose %q", fixID, ownFix, ownExpose)
	}
	if p, err := e.flow.Get(context.Background(), fixID); err != nil || p.RequestedBy != alone || len(p.Approvers) != 0 {
		t.Fatalf("the first press's proposal: %+v, %v", p, err)
	}

	// The second person: answered at once, naming both; the fix is
	// applied, once.
	conv := e.slack.pressIn(approver2, blockkit.ActionApprove, inc.Key)
	if r := conv.approvedAtOnce(t, approver2, e.source).Form.Get("text"); !strings.Contains(r, "`"+fixID+"` (requested by <@"+alone+">) approved by <@"+approver2+">") {
		t.Errorf("second approver answered %q", r)
	}
	r := conv.posted(contains("applied", "failed")).Form.Get("text")
	if !strings.Contains(r, "`"+fixID+"` (requested by <@"+alone+">) approved by <@"+approver2+"> and applied") {
		t.Fatalf("second approver: outcome %q", r)
	}
	fixed := e.state(t)
	if !strings.Contains(fixed.noProxy, "kubernetes") || fixed.rv == before.rv {
		t.Fatalf("after two approvals noProxy = %q", fixed.noProxy)
	}
	var executed []string
	for _, rec := range recentAudit(t, e.log) {
		if rec.Kind == audit.KindExecuted && rec.ActionID == fixID {
			executed = append(executed, rec.ID)
		}
	}
	// Once by the bot, once on the agent's own subject.
	if slices.Sort(executed); !slices.Equal(executed, []string{fixID + ".executed", fixID + ".executed.agent"}) {
		t.Errorf("executions of %s audited: %v, want one by the bot and one by the agent", fixID, executed)
	}

	// A rollback is a change too.
	rb := rollbackIDs.FindString(e.slack.command("rollback "+fixID, alone, func(s string) bool { return rollbackIDs.MatchString(s) }))
	if got := e.slack.command("approve "+rb, alone, contains(rb)); !strings.Contains(got, "Four-eyes") {
		t.Errorf("rollback approved by its requester: %q", got)
	}
	if got := press(alone, blockkit.ActionApprove, rb, contains(rb)); !strings.Contains(got, "Four-eyes") {
		t.Errorf("rollback button pressed by its requester: %q", got)
	}
	if s := stateOf(t, e.flow, rb); s != approval.StatePending {
		t.Fatalf("the rollback approved by its requester alone is %s", s)
	}
	if now := e.state(t); now != fixed {
		t.Fatalf("a rollback by one person changed the cluster: %+v → %+v", fixed, now)
	}
	a, c := e.slack.send("approve "+rb, approver2)
	a.approvedAtOnce(t, approver2, e.source)
	if got := c.posted(contains(rb)).Form.Get("text"); !strings.Contains(got, "`"+fixID+"` is now rolled back") {
		t.Fatalf("two-person rollback: outcome %q", got)
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

// forger seals requests as someone holding a signing key does: the
// scheme of package approval (a context string before the JSON body),
// checked against the bot's own seal in TestForgedActionRequestsLive.
type forger struct {
	key  string
	sign func([]byte) ([]byte, error)
}

// approval's sealing contexts of requests and of a proposal's terms.
const (
	requestContext  = "hcpbot-request-v2\n"
	proposalContext = "hcpbot-proposal-v2\n"
)

func (f forger) seal(t *testing.T, req approval.Request) []byte {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := f.sign(append([]byte(requestContext), body...))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(approval.Seal{Body: body, Key: f.key, Sig: sig})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// termsDigest is what a request names a proposal by: the digest of the
// sealed terms as the approval store holds them (readable by whoever can
// read the store).
func termsDigest(t *testing.T, js jetstream.JetStream, id string) string {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bus.ProposalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var rec approval.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write([]byte(proposalContext))
	h.Write(rec.Proposal.Body)
	h.Write([]byte{0})
	h.Write(rec.Proposal.Sig)
	return hex.EncodeToString(h.Sum(nil))
}

// Requests put straight onto NATS, by whoever can publish there, reach
// the real agent (approval.Serve reading the approval store on NATS KV,
// the executor on the real API server). Not a sealed request, unsigned,
// sealed with another key, tampered after sealing, sealed with the bot's
// own key for an unapproved, expired or rejected proposal, an executed
// proposal's order replayed under a fresh message id: each is refused
// with a coded answer (recorded under its message id), audited by the
// agent with the reason, shown in Slack by RefusalNotices, and the
// cluster is unchanged. The executed proposal's order sealed afresh
// under its own id is dropped by the stream.
func TestForgedActionRequestsLive(t *testing.T) {
	e := newLiveEnv(t)
	ctx := context.Background()
	acts := e.cmds.Changes
	subject, err := wire.Subject(e.source)
	if err != nil {
		t.Fatal(err)
	}
	k := diagnose.Key{Source: e.source, Cluster: event.ClusterRef{Namespace: e.ns, Name: "kv"}}
	fix := func(add string) *diagnose.Fix {
		return &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/" + e.ns + "/kv", Before: scenario.SeedNoProxy, Add: []string{add}}
	}
	propose := func(c *command.Changes, add string) approval.Proposal {
		t.Helper()
		id := actionID.FindString(c.ProposeNoProxy(ctx, k, nil, fix(add), nil, requester).Text)
		p, err := e.flow.Get(ctx, id)
		if err != nil {
			t.Fatalf("proposal %q: %v", id, err)
		}
		return p
	}

	// A genuine two-person execution, its order captured off the wire by
	// a plain subscriber beside the agent's consumer.
	spy, err := e.botNC.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	genuine := propose(acts, "kubernetes")
	var conv later
	start := time.Now()
	r := acts.Approve(conv.ctx(), genuine.ID, approver1)
	sentAtOnce(t, "genuine approval", r, time.Since(start), approver1, e.source)
	if got := conv.wait(t, "applied"); !strings.Contains(got.Text, "approved by <@"+approver1+"> and applied") {
		t.Fatalf("genuine approval: outcome %q", got.Text)
	}
	captured, err := spy.NextMsg(natsWait)
	if err != nil {
		t.Fatalf("the genuine request was not seen: %v", err)
	}
	_ = spy.Unsubscribe()
	before := e.state(t)

	// The forging kit matches what the bot seals: its signature over the
	// captured order and the digest the order names.
	var order approval.Seal
	if err := json.Unmarshal(captured.Data, &order); err != nil {
		t.Fatal(err)
	}
	var genuineReq approval.Request
	if err := json.Unmarshal(order.Body, &genuineReq); err != nil {
		t.Fatal(err)
	}
	bot := forger{key: e.signer.PublicKey(), sign: e.seal.Sign}
	if sig, _ := bot.sign(append([]byte(requestContext), order.Body...)); !bytes.Equal(sig, order.Sig) || genuineReq.Proposal != termsDigest(t, e.botJS, genuine.ID) {
		t.Fatal("the forging kit does not seal as the bot does")
	}

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

	// Proposed two hours ago, an hour to live: expired on approval.
	past := openFlow(t, e.botJS, e.signer, e.log, fourEyes(), func(c *approval.Config) {
		c.Now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	})
	expired := propose(&command.Changes{Flow: past}, "expired.example")
	if _, err := e.flow.Approve(ctx, expired.ID, approver1); !errors.Is(err, approval.ErrExpired) {
		t.Fatalf("approving the expired proposal: %v", err)
	}
	pending := propose(acts, "pending.example")
	rejected := propose(acts, "rejected.example")
	if _, err := e.flow.Reject(ctx, rejected.ID, approver2, "no"); err != nil {
		t.Fatal(err)
	}
	other, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	otherPub, err := other.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	orderOf := func(p approval.Proposal) approval.Request {
		return approval.Request{ID: p.ID, Source: e.source, Proposal: termsDigest(t, e.botJS, p.ID), IssuedAt: time.Now().UTC()}
	}
	plain, err := json.Marshal(pending.Change)
	if err != nil {
		t.Fatal(err)
	}
	tampered := order
	tampered.Body = []byte(strings.Replace(string(order.Body), genuine.ID, pending.ID, 1))
	tamperedData, err := json.Marshal(tampered)
	if err != nil {
		t.Fatal(err)
	}

	// What the agent cannot verify as the bot's is audited and shown in
	// Slack, never answered in the results bucket (an answer there under
	// a pending proposal's id would decide its outcome); what the bot's
	// key sealed is answered, naming the terms the order named.
	// Each sealed by the bot's key goes under the message id its bytes
	// make (wire.MessageID), as the bot sends it.
	sealedBy := func(p approval.Proposal) (string, []byte) {
		data := bot.seal(t, orderOf(p))
		return wire.MessageID(p.ID, data), data
	}
	unapprovedID, unapprovedData := sealedBy(pending)
	expiredID, expiredData := sealedBy(expired)
	rejectedID, rejectedData := sealedBy(rejected)
	cases := []struct {
		name, msgID string
		data        []byte
		why         string // in the answer, the agent's audit record and Slack
		answered    bool
	}{
		{"not a sealed request", "forged-0001", plain, "not a sealed request", false},
		{"unsigned", "forged-0002", []byte(`{}`), "unsigned", false},
		{"sealed with another key", "forged-0003", forger{key: otherPub, sign: other.Sign}.seal(t, orderOf(pending)), "sealed by a key that is not trusted", false},
		{"tampered after sealing", "forged-0004", tamperedData, "bad signature", false},
		// Pending by its own terms: the bot sends no such request, so the
		// agent answers nothing — the genuine one, once approved, must not
		// find a refusal recorded.
		{"unapproved proposal", unapprovedID, unapprovedData, pending.ID + " has 0 of the 1 approvals it needs", false},
		{"expired proposal", expiredID, expiredData, expired.ID + " expired before it was approved", true},
		{"rejected proposal", rejectedID, rejectedData, rejected.ID + " was rejected by " + approver2, true},
		{"executed, replayed under a fresh message id", "forged-0008", captured.Data, "a replay", false},
	}
	subject, serr := wire.Subject(e.source)
	if serr != nil {
		t.Fatal(serr)
	}
	for _, tc := range cases {
		auditedBefore := agentRefusals(t, e.log)
		wctx, cancel := context.WithTimeout(ctx, natsWait)
		_, err := e.botJS.PublishMsg(wctx, &nats.Msg{Subject: subject, Data: tc.data}, jetstream.WithMsgID(tc.msgID))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		testenv.Eventually(t, natsWait, tc.name+": refusal audited", func() bool { return agentRefusals(t, e.log) == auditedBefore+1 })
		answer, ok := agentAnswer(t, e.botJS, e.source, wire.ActionOf(tc.msgID))
		switch {
		case !tc.answered && ok:
			t.Errorf("%s: answered %+v in the results bucket", tc.name, answer)
		case !tc.answered:
		case !ok:
			t.Errorf("%s: not answered", tc.name)
		case answer.Code != approval.CodeUnauthorized || answer.Change != nil || !errors.Is(answer.Err(), approval.ErrUnauthorized) ||
			!strings.Contains(answer.Error, tc.why) || answer.Proposal != termsDigest(t, e.botJS, wire.ActionOf(tc.msgID)):
			t.Errorf("%s: answer %+v, want code %s saying %q for the terms it named", tc.name, answer, approval.CodeUnauthorized, tc.why)
		}
		if now := e.state(t); now != before {
			t.Fatalf("%s changed the cluster: %+v → %+v", tc.name, before, now)
		}
	}
	for _, rec := range recentAudit(t, e.log) {
		if rec.Kind == audit.KindRefused && strings.HasPrefix(rec.Summary, approval.RefusedByAgent) && !strings.Contains(rec.Summary, string(approval.CodeUnauthorized)) {
			t.Errorf("agent refusal without its code: %+v", rec)
		}
	}

	// The executed proposal's order, sealed afresh with the bot's key,
	// under the id its bytes make: the agent finds it answered and runs
	// nothing again.
	again := bot.seal(t, orderOf(genuine))
	if _, err := e.botJS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: again}, jetstream.WithMsgID(wire.MessageID(genuine.ID, again))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, natsWait, "the order acknowledged", func() bool {
		s, err := e.botJS.Stream(ctx, bus.ActionsStreamName)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
	if now := e.state(t); now != before {
		t.Fatalf("the executed proposal's order again changed the cluster: %+v → %+v", before, now)
	}

	// Slack shows each refusal: one message for the agent, updated with the
	// count, a thread reply per refusal.
	shown := func(r *slackrec.Recorder) (root slackrec.Message, missing []string) {
		for _, m := range r.Messages(opsChannel) {
			if m.ThreadTS != "" || !strings.Contains(m.Text, "refused") || !strings.Contains(m.Text, e.source) {
				continue
			}
			replies := r.Thread(opsChannel, m.TS)[1:]
			if !strings.Contains(m.Text, fmt.Sprintf("refused %d action requests", len(replies))) {
				return m, []string{"a count equal to the replies"}
			}
			for _, tc := range cases {
				if !slices.ContainsFunc(replies, func(m slackrec.Message) bool { return strings.Contains(m.Text, tc.why) }) {
					missing = append(missing, tc.why)
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
	if root, _ := shown(e.slack.rec); !strings.Contains(root.Text, "Nothing was changed") || !strings.Contains(root.Text, fmt.Sprintf("refused %d action requests", len(cases))) {
		t.Errorf("refusal notice: %q", root.Text)
	}
	for _, p := range []approval.Proposal{pending, expired, rejected} {
		if s := stateOf(t, e.flow, p.ID); s == approval.StateExecuted || s == approval.StateApproved {
			t.Errorf("%s is %s after the forgeries", p.ID, s)
		}
	}
	if now := e.state(t); now != before {
		t.Errorf("the forgeries changed the cluster: %+v → %+v", before, now)
	}
}

func agentRefusals(t *testing.T, l *audit.Log) int {
	t.Helper()
	n := 0
	for _, r := range recentAudit(t, l) {
		if r.Kind == audit.KindRefused && strings.HasPrefix(r.Summary, approval.RefusedByAgent) {
			n++
		}
	}
	return n
}
