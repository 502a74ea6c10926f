package approval_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
)

// The attack of issue 27: whoever holds the bot's NATS credentials but
// not its signing key rewrites pending proposals in the approval store to
// "approved by someone else". Two bot replicas sweep the store every
// second and an agent serves. No rewritten proposal is ever sent or run;
// each is reported once per rewrite, as a forgery in the trail and in
// hcpbot_approval_forgeries_total. A genuine approval meanwhile runs.
func TestForgedApprovalRecordNeverRuns(t *testing.T) {
	e := newEnv(t)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	replicas := []*approval.Flow{
		e.flow(fourEyes(), func(c *approval.Config) { c.Registerer = regs[0] }),
		e.flow(fourEyes(), func(c *approval.Config) { c.Registerer = regs[1] }),
	}
	e.serve()
	ctx := testContext(t)
	var real outcome
	genuine := approved(t, replicas[0], &real)
	waitFor(t, 30*time.Second, "the genuine approval runs", func() bool { return len(real.got()) == 1 })

	attacker := e.connect("bot")
	kv, err := attacker.JS.KeyValue(ctx, bus.ProposalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, genuine.ID)
	if err != nil {
		t.Fatal(err)
	}
	var genuineRec approval.Record
	if err := json.Unmarshal(entry.Value(), &genuineRec); err != nil {
		t.Fatal(err)
	}
	own, _ := nkeys.CreateUser()
	ownPub, _ := own.PublicKey()

	type rewrite func(id string, rec approval.Record, digest string) []byte
	forge := map[string]rewrite{
		"decision with a made-up signature": func(id string, rec approval.Record, digest string) []byte {
			body, _ := json.Marshal(approval.Decision{ProposalID: id, Prev: digest, By: approver, Verdict: approval.VerdictApprove, At: time.Now()})
			rec.Decisions = []approval.Seal{{Body: body, Key: genuineRec.Proposal.Key, Sig: []byte(strings.Repeat("s", 64))}}
			b, _ := json.Marshal(rec)
			return b
		},
		"the decisions of another approved proposal": func(_ string, rec approval.Record, _ string) []byte {
			rec.Decisions = genuineRec.Decisions
			b, _ := json.Marshal(rec)
			return b
		},
		"a decision sealed with the attacker's key": func(id string, rec approval.Record, digest string) []byte {
			body, _ := json.Marshal(approval.Decision{ProposalID: id, Prev: digest, By: approver, Verdict: approval.VerdictApprove, At: time.Now()})
			sig, _ := own.Sign(append([]byte(approval.DecisionContext), body...))
			rec.Decisions = []approval.Seal{{Body: body, Key: ownPub, Sig: sig}}
			b, _ := json.Marshal(rec)
			return b
		},
		"an outcome recorded as executed": func(id string, rec approval.Record, _ string) []byte {
			body, _ := json.Marshal(approval.Outcome{ProposalID: id, State: approval.StateExecuted, At: time.Now()})
			rec.Outcome = &approval.Seal{Body: body, Key: genuineRec.Proposal.Key, Sig: []byte(strings.Repeat("o", 64))}
			b, _ := json.Marshal(rec)
			return b
		},
		"the genuine proposal's decisions and outcome": func(_ string, rec approval.Record, _ string) []byte {
			rec.Decisions, rec.Outcome = genuineRec.Decisions, genuineRec.Outcome
			b, _ := json.Marshal(rec)
			return b
		},
		"the genuine record copied under this key": func(string, approval.Record, string) []byte {
			b, _ := json.Marshal(genuineRec)
			return b
		},
		"the state field of an older hcpbot": func(id string, _ approval.Record, _ string) []byte {
			return []byte(`{"id":"` + id + `","state":"approved","requestedBy":"` + requester + `","decidedBy":"` + approver + `"}`)
		},
	}
	// A mark that does not verify is ignored as if never written: the
	// proposal's own seals stand, and it can still be approved.
	marksOnly := map[string]bool{"an outcome recorded as executed": true}
	var forged []string
	ignored := map[string]bool{}
	for name, f := range forge {
		p, err := replicas[1].Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		var rec approval.Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Update(ctx, p.ID, f(p.ID, rec, approval.Digest(p)), e.Revision()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		forged = append(forged, p.ID)
		ignored[p.ID] = marksOnly[name]
		t.Logf("%s: %s", p.ID, name)
	}

	// Five sweeps of each replica.
	time.Sleep(5 * time.Second)
	waitFor(t, 30*time.Second, "each forgery in the trail", func() bool {
		for _, id := range forged {
			if countKind(e.records(id), audit.KindForged) == 0 {
				return false
			}
		}
		return true
	})
	for _, id := range forged {
		if n := e.x.runs(id); n != 0 {
			t.Errorf("%s ran %d times", id, n)
		}
		if _, ok := e.result(id); ok {
			t.Errorf("%s reached the agent", id)
		}
		if n := countKind(e.records(id), audit.KindForged); n > 2 {
			t.Errorf("%s reported %d times; once per replica at most", id, n)
		}
		_, err := replicas[0].Approve(ctx, id, approver2)
		switch {
		case ignored[id] && err != nil:
			t.Errorf("%s: its forged outcome stopped its genuine approval: %v", id, err)
		case !ignored[id] && err == nil:
			t.Errorf("%s could be approved after the rewrite", id)
		}
	}
	for id, ok := range ignored {
		if ok {
			waitFor(t, 30*time.Second, "the approved proposal under a forged outcome runs", func() bool { return e.x.runs(id) == 1 })
		}
	}
	var reported, sent float64
	for _, reg := range regs {
		reported += gathered(t, reg, "hcpbot_approval_forgeries_total", "", "")
		sent += gathered(t, reg, "hcpbot_approval_requests_sent_total", "", "")
	}
	if reported < float64(len(forged)) {
		t.Errorf("forgeries counted %v, want at least %d", reported, len(forged))
	}
	if want := float64(1 + len(marksOnly)); sent != want {
		t.Errorf("%v requests sent, want %v (the genuine ones)", sent, want)
	}
}
