package audit_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/audit"
)

// Record ids are predictable ("<action>.approved.<user>"). Whoever may
// publish on any audit subject stores a record under such an id first, on
// a subject of its own: the genuine record is stored all the same, since
// a record is de-duplicated on its own subject only.
func TestAuditIDOnAnotherSubjectDoesNotPreempt(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	const id = "act-aaaa.approved.U1"
	for _, subject := range []string{"hcpbot.audit.housekeeping", "hcpbot.audit.mgmt-1.agent"} {
		m := &nats.Msg{Subject: subject, Data: []byte(`{"id":"placeholder","kind":"silenced"}`), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := c.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		m.Header.Set(jetstream.MsgIDHeader, "hcpbot.audit.mgmt-1:"+id)
		if _, err := c.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Append(ctx, audit.Record{ID: id, Kind: audit.KindApproved, Source: "mgmt-1", ActionID: "act-aaaa", Actor: "U1"}); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Since(ctx, time.Time{}, "hcpbot.audit.mgmt-1")
	if err != nil || len(recs) != 1 || recs[0].ID != id {
		t.Fatalf("the genuine record: %+v, %v", recs, err)
	}
}

// Once the bot's chain began, a record without chain fields on a fresh
// bot subject is a problem, not history: bot replicas are upgraded
// together, and only a forger writes the old shape then. Before it, such
// records are counted as legacy (TestAuditVerifyLegacyRecords).
func TestAuditVerifyLateUnchainedRecord(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	if err := l.Append(ctx, audit.Record{Kind: audit.KindProposed}); err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(audit.Record{ID: "hk-1", Kind: audit.KindApproved, Source: "housekeeping", Time: time.Now().UTC()})
	seq := publish(t, c.JS, "hcpbot.audit.housekeeping", old)
	r := verify(t, l)
	if r.ProblemCount != 1 || r.Problems[0].Seq != seq || r.Problems[0].Kind != audit.ProblemUnchained || r.Legacy != 0 {
		t.Fatalf("report %+v; want one unchained problem at seq %d", r, seq)
	}
}

// An agent's subject is written by that agent's NATS user only, and an
// agent records only what it executed or refused, of its own management
// cluster. Its Log refuses anything else; a record its user publishes
// anyway is reported by Verify and not read back.
func TestAuditAgentRecordsOnlyItsOwn(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	bot := openLog(t, c.JS)
	agent, err := audit.ForAgent(c.JS, "mgmt-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []audit.Record{
		{Kind: audit.KindApproved, Actor: "U2", ActionID: "act-bbbb"},
		{Kind: audit.KindExecuted, Source: "mgmt-2", ActionID: "act-bbbb"},
	} {
		if err := agent.Append(ctx, r); err == nil {
			t.Errorf("the agent's Log appended %s of %q", r.Kind, r.Source)
		}
	}
	if err := agent.Append(ctx, audit.Record{Kind: audit.KindExecuted, ActionID: "act-aaaa"}); err != nil {
		t.Fatal(err)
	}
	_, head := last(t, auditStream(t, c.JS), "hcpbot.audit.mgmt-1.agent")
	seq1, _ := last(t, auditStream(t, c.JS), "hcpbot.audit.mgmt-1.agent")
	wrongSource := encodeAs(t, nil, audit.Record{ID: "x1", Kind: audit.KindExecuted, Source: "mgmt-2", ActionID: "act-bbbb"}, seq1, head)
	s2 := publish(t, c.JS, "hcpbot.audit.mgmt-1.agent", wrongSource)
	wrongKind := encodeAs(t, nil, audit.Record{ID: "x2", Kind: audit.KindApproved, Source: "mgmt-1", ActionID: "act-cccc", Actor: "U2"}, s2, hexSum(wrongSource))
	s3 := publish(t, c.JS, "hcpbot.audit.mgmt-1.agent", wrongKind)

	r := verify(t, bot)
	got := map[uint64]audit.ProblemKind{}
	for _, p := range r.Problems {
		got[p.Seq] = p.Kind
	}
	if len(got) != 2 || got[s2] != audit.ProblemMisplaced || got[s3] != audit.ProblemMisplaced {
		t.Fatalf("problems %v; want seq %d and %d misplaced", r.Problems, s2, s3)
	}
	recs, err := bot.Since(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.ActionID == "act-bbbb" || rec.ActionID == "act-cccc" {
			t.Errorf("read back a misplaced record: %s", fmt.Sprint(rec))
		}
	}
}
