package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

func newSigner(t testing.TB) audit.Signer {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	s, err := audit.NewKeyPairSigner(kp)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func auditStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	s, err := js.Stream(testContext(t), audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hexSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// last is the sequence and digest of the last message on subject.
func last(t *testing.T, s jetstream.Stream, subject string) (uint64, string) {
	t.Helper()
	m, err := s.GetLastMsgForSubject(testContext(t), subject)
	if err != nil {
		t.Fatalf("last message on %s: %v", subject, err)
	}
	return m.Sequence, hexSum(m.Data)
}

// encodeAs renders r as Append stores it, chained onto prevSeq/prevDigest
// and signed by signer (nil: unsigned): what an attacker writing on the
// bot's subjects can make with a key of its own.
func encodeAs(t *testing.T, signer audit.Signer, r audit.Record, prevSeq uint64, prevDigest string) []byte {
	t.Helper()
	r.Chain, r.PrevSeq, r.PrevDigest = audit.ChainVersion, prevSeq, prevDigest
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	body, err := json.Marshal(r)
	if err != nil || signer == nil {
		return body
	}
	r.Key = signer.PublicKey()
	if body, err = json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if r.Sig, err = signer.Sign(append([]byte(audit.SigningContext), body...)); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func publish(t *testing.T, js jetstream.JetStream, subject string, data []byte) uint64 {
	t.Helper()
	ack, err := js.Publish(testContext(t), subject, data)
	if err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
	return ack.Sequence
}

func verify(t *testing.T, l *audit.Log, keys ...string) audit.Report {
	t.Helper()
	r, err := l.Verify(testContext(t), audit.VerifyOptions{TrustedKeys: keys})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return r
}

func mustOK(t *testing.T, r audit.Report) {
	t.Helper()
	if !r.OK() || len(r.Problems) != 0 {
		t.Fatalf("Verify found %d problems: %v", r.ProblemCount, r.Problems)
	}
}

// Many appends on several subjects, the agent's among them: every record
// names the exact bytes of its predecessor, the bot's are signed, and
// Verify finds nothing wrong.
func TestAuditChainIntact(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	signer := newSigner(t)
	l := openLog(t, c.JS, audit.WithSigner(signer))
	agent, err := audit.ForAgent(c.JS, "mgmt-1")
	if err != nil {
		t.Fatal(err)
	}
	const n = 150
	for i := range n {
		var err error
		switch i % 3 {
		case 0:
			err = l.Append(ctx, audit.Record{Kind: audit.KindProposed, ActionID: fmt.Sprintf("act-%04d", i)})
		case 1:
			err = l.Append(ctx, audit.Record{Kind: audit.KindApproved, Source: "mgmt-1", Actor: "U1"})
		default:
			err = agent.Append(ctx, audit.Record{Kind: audit.KindRefused, Reason: "not signed"})
		}
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	r := verify(t, l, signer.PublicKey())
	mustOK(t, r)
	if r.Records != n || r.Subjects != 3 || r.FirstSeq != 1 || r.LastSeq != n || r.Signed != 2*n/3 || r.Legacy != 0 || r.AgedOut != 0 || !r.SignaturesChecked {
		t.Fatalf("report %+v", r)
	}

	// Walk the stored bytes: each record names its subject's previous
	// message, the first of each subject none.
	s := auditStream(t, c.JS)
	prev := map[string]*jetstream.RawStreamMsg{}
	for seq := uint64(1); seq <= n; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var rec audit.Record
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatal(err)
		}
		p := prev[m.Subject]
		switch {
		case rec.Chain != audit.ChainVersion:
			t.Fatalf("seq %d: chain %d", seq, rec.Chain)
		case p == nil && (rec.PrevSeq != 0 || rec.PrevDigest != ""):
			t.Fatalf("seq %d, first on %s, names %d", seq, m.Subject, rec.PrevSeq)
		case p != nil && (rec.PrevSeq != p.Sequence || rec.PrevDigest != hexSum(p.Data)):
			t.Fatalf("seq %d names %d %s, want %d %s", seq, rec.PrevSeq, rec.PrevDigest, p.Sequence, hexSum(p.Data))
		case strings.HasSuffix(m.Subject, ".agent") && (rec.Key != "" || rec.Sig != nil):
			t.Fatalf("seq %d: agent record signed", seq)
		case !strings.HasSuffix(m.Subject, ".agent") && (rec.Key != signer.PublicKey() || len(rec.Sig) != 64):
			t.Fatalf("seq %d: bot record not signed: %s", seq, m.Data)
		}
		prev[m.Subject] = m
	}
	for _, subject := range []string{"hcpbot.audit.bot", "hcpbot.audit.mgmt-1", "hcpbot.audit.mgmt-1.agent"} {
		if prev[subject] == nil {
			t.Errorf("no record on %s", subject)
		}
	}
}

// An uncontended append costs one publish: the head of the subject is
// read once, then kept.
func TestAuditAppendReadsHeadOnce(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	sniff, err := c.NC.SubscribeSync("$JS.API.STREAM.MSG.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := l.Append(ctx, audit.Record{Kind: audit.KindExecuted, ActionID: fmt.Sprintf("act-%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The server routed every request before answering it; the flush's
	// PONG comes after them on this connection.
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, _ := sniff.Pending()
	// Unread messages would hold up the connection's drain on close.
	if err := sniff.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("20 uncontended appends read the subject's head %d times, want once", n)
	}
	mustOK(t, verify(t, l))
}

// What the server answers when a record ID is published again after the
// subject moved on: a stale expected sequence is refused (the expected
// sequence is checked before the ID), the right one is answered as a
// duplicate of the first landing. Append retries the one into the other,
// so a retried append never lands twice, whichever replica retries.
func TestAuditAppendRetryAfterChainMoved(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	a := openLog(t, c.JS)
	b := openLog(t, c.JS)
	rec := audit.Record{ID: "act-aaaa.approved", Kind: audit.KindApproved, ActionID: "act-aaaa", Actor: "U1"}
	if err := a.Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(ctx, audit.Record{Kind: audit.KindProposed, ActionID: "act-bbbb"}); err != nil {
		t.Fatal(err)
	}
	const subject = "hcpbot.audit.bot"
	_, err := c.JS.Publish(ctx, subject, []byte(`{}`), jetstream.WithMsgID(subject+":"+rec.ID), jetstream.WithExpectLastSequencePerSubject(1))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("known ID, stale expected sequence: %v; want wrong last sequence", err)
	}
	ack, err := c.JS.Publish(ctx, subject, []byte(`{}`), jetstream.WithMsgID(subject+":"+rec.ID), jetstream.WithExpectLastSequencePerSubject(2))
	if err != nil || !ack.Duplicate || ack.Sequence != 1 {
		t.Fatalf("known ID, current expected sequence: %+v, %v; want a duplicate of seq 1", ack, err)
	}

	// a still believes seq 1 is the head; b knows better. Both retry.
	for _, l := range []*audit.Log{a, b, a} {
		if err := l.Append(ctx, rec); err != nil {
			t.Fatalf("retried Append: %v", err)
		}
	}
	info, err := auditStream(t, c.JS).Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream state %+v, %v; want the 2 records once each", info, err)
	}
	// Both still append (and chain) after the duplicates.
	for _, l := range []*audit.Log{a, b} {
		if err := l.Append(ctx, audit.Record{Kind: audit.KindExecuted}); err != nil {
			t.Fatal(err)
		}
	}
	r := verify(t, a)
	mustOK(t, r)
	if r.Records != 4 {
		t.Fatalf("records %d, want 4", r.Records)
	}
}

// Two replicas appending at once onto one subject keep one linear chain:
// no record is lost, doubled, or chained onto a record another one
// already follows.
func TestAuditConcurrentReplicasKeepOneChain(t *testing.T) {
	srv := natstest.RunServer(t)
	signer := newSigner(t)
	var logs []*audit.Log
	for i := range 2 {
		conn, err := bus.Connect(testContext(t), bus.Config{URLs: []string{srv.ClientURL()}, Name: fmt.Sprintf("replica-%d", i)}, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		logs = append(logs, openLog(t, conn.JS, audit.WithSigner(signer)))
	}
	ctx := testContext(t)
	const each = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for i, l := range logs {
		for j := range each {
			wg.Go(func() {
				if err := l.Append(ctx, audit.Record{ID: fmt.Sprintf("r%d-%d", i, j), Kind: audit.KindExecuted}); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r := verify(t, logs[0], signer.PublicKey())
	mustOK(t, r)
	if r.Records != 2*each || r.Subjects != 1 || r.Signed != 2*each {
		t.Fatalf("report %+v", r)
	}
	recs, err := logs[1].Recent(ctx, 3*each)
	if err != nil || len(recs) != 2*each {
		t.Fatalf("Recent: %d records, %v", len(recs), err)
	}
	ids := map[string]bool{}
	for i, rec := range recs {
		ids[rec.ID] = true
		if i+1 < len(recs) && rec.PrevSeq != recs[i+1].Seq {
			t.Fatalf("seq %d names %d, want %d", rec.Seq, rec.PrevSeq, recs[i+1].Seq)
		}
	}
	if len(ids) != 2*each {
		t.Fatalf("%d distinct records, want %d", len(ids), 2*each)
	}
}

// Someone with the bot's NATS user but not its key publishes on the bot's
// subjects: every kind of forgery is reported, at its sequence, and the
// bot's own records around them are fine.
func TestAuditVerifyReportsForgeries(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	signer := newSigner(t)
	bot := openLog(t, c.JS, audit.WithSigner(signer))
	s := auditStream(t, c.JS)
	const subject = "hcpbot.audit.bot"
	appendOK := func() uint64 {
		t.Helper()
		if err := bot.Append(ctx, audit.Record{Kind: audit.KindApproved, Actor: "U1", ActionID: "act-good"}); err != nil {
			t.Fatal(err)
		}
		seq, _ := last(t, s, subject)
		return seq
	}
	forged := audit.Record{Kind: audit.KindApproved, Actor: "UMALLORY", ActionID: "act-evil", Source: "bot"}
	want := map[uint64]audit.ProblemKind{}

	appendOK()
	appendOK()
	// Unsigned, properly chained: the attacker's own Log without a key.
	if err := openLog(t, c.JS).Append(ctx, forged); err != nil {
		t.Fatal(err)
	}
	seq, _ := last(t, s, subject)
	want[seq] = audit.ProblemUnsigned
	appendOK() // the bot's cached head is stale: it re-reads and chains on
	// Signed by another key, properly chained.
	if err := openLog(t, c.JS, audit.WithSigner(newSigner(t))).Append(ctx, forged); err != nil {
		t.Fatal(err)
	}
	seq, _ = last(t, s, subject)
	want[seq] = audit.ProblemBadSignature
	// Validly signed (a leaked record template, or a bug) but naming the
	// right predecessor with the wrong digest.
	seq, _ = last(t, s, subject)
	want[publish(t, c.JS, subject, encodeAs(t, signer, forged, seq, strings.Repeat("0", 64)))] = audit.ProblemBrokenLink
	// A replay of the bot's second record, byte for byte: it names seq 1.
	second, err := s.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	want[publish(t, c.JS, subject, second.Data)] = audit.ProblemGap
	// Not a record at all; the bot chains onto it all the same.
	want[publish(t, c.JS, subject, []byte("rm -rf /"))] = audit.ProblemUndecodable
	// The same genuine record, re-chained onto the subject's head: the
	// chain holds, the signature does not.
	var rechained audit.Record
	if err := json.Unmarshal(second.Data, &rechained); err != nil {
		t.Fatal(err)
	}
	rechained.PrevSeq, rechained.PrevDigest = last(t, s, subject)
	data, err := json.Marshal(rechained)
	if err != nil {
		t.Fatal(err)
	}
	want[publish(t, c.JS, subject, data)] = audit.ProblemBadSignature
	appendOK()
	// A record in the pre-chain format, after the chain began.
	legacy, _ := json.Marshal(audit.Record{ID: "old", Kind: audit.KindApproved, Source: "bot", Time: time.Now().UTC()})
	want[publish(t, c.JS, subject, legacy)] = audit.ProblemUnchained
	appendOK()
	// The bot's first record on another subject, copied onto an empty one.
	if err := bot.Append(ctx, audit.Record{Kind: audit.KindProposed, Source: "mgmt-9"}); err != nil {
		t.Fatal(err)
	}
	first, err := s.GetLastMsgForSubject(ctx, "hcpbot.audit.mgmt-9")
	if err != nil {
		t.Fatal(err)
	}
	want[publish(t, c.JS, "hcpbot.audit.mgmt-8", first.Data)] = audit.ProblemMisplaced

	r := verify(t, bot, signer.PublicKey())
	got := map[uint64][]audit.ProblemKind{}
	for _, p := range r.Problems {
		got[p.Seq] = append(got[p.Seq], p.Kind)
		if p.Detail == "" || !strings.HasPrefix(p.Subject, "hcpbot.audit.") {
			t.Errorf("problem without detail or subject: %+v", p)
		}
	}
	for seq, kind := range want {
		if !slices.Contains(got[seq], kind) {
			t.Errorf("seq %d: problems %v, want %q", seq, got[seq], kind)
		}
	}
	for seq, kinds := range got {
		if _, ok := want[seq]; !ok {
			t.Errorf("seq %d: unexpected problems %v", seq, kinds)
		}
	}
	// The forgeries with the attacker's keys are not also broken links:
	// the attacker can chain, only not sign.
	for _, seq := range []uint64{3, 5} {
		if len(got[seq]) != 1 {
			t.Errorf("seq %d: problems %v, want only the signature's", seq, got[seq])
		}
	}
	if r.ProblemCount != len(r.Problems) || r.Signed != 9 { // replays and copies carry the bot's valid signature: the chain catches them
		t.Errorf("report %+v", r)
	}
	t.Logf("report: %d records, %d problems: %v", r.Records, r.ProblemCount, r.Problems)

	// Without keys, only the chain is checked.
	r = verify(t, bot)
	for _, p := range r.Problems {
		if p.Kind == audit.ProblemUnsigned || p.Kind == audit.ProblemBadSignature {
			t.Errorf("signature checked without keys: %v", p)
		}
	}
	if r.SignaturesChecked || r.ProblemCount != 5 {
		t.Errorf("without keys: %d problems %v", r.ProblemCount, r.Problems)
	}
	if _, err := bot.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{"not-a-key"}}); err == nil {
		t.Error("Verify accepted a trusted key that is no public nkey")
	}
}

// adminStream is the audit stream as someone with stream admin rights
// could make it: deleting a message allowed.
func adminStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(testContext(t), jetstream.StreamConfig{
		Name: audit.StreamName, Subjects: []string{audit.StreamSubjects}, MaxAge: time.Hour, Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A record removed from the middle of a subject is a gap; removed from the
// front of the stream, it looks as if it had aged out, which is fine.
func TestAuditVerifyGapAndAgedOut(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	signer := newSigner(t)
	s := adminStream(t, c.JS)
	l := audit.ForStream(c.JS, s, signer)
	for i := range 6 {
		source := []string{"mgmt-1", "mgmt-2"}[i%2]
		if err := l.Append(ctx, audit.Record{Kind: audit.KindExecuted, Source: source, ActionID: fmt.Sprintf("act-%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// mgmt-1: 1, 3, 5; mgmt-2: 2, 4, 6.
	mustOK(t, verify(t, l, signer.PublicKey()))

	if err := s.DeleteMsg(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r := verify(t, l, signer.PublicKey())
	mustOK(t, r)
	if r.FirstSeq != 2 || r.AgedOut != 1 || r.Records != 5 {
		t.Fatalf("after the first record aged out: %+v", r)
	}

	if err := s.DeleteMsg(ctx, 4); err != nil {
		t.Fatal(err)
	}
	r = verify(t, l, signer.PublicKey())
	if r.ProblemCount != 1 || r.Problems[0].Seq != 6 || r.Problems[0].Kind != audit.ProblemGap || r.Problems[0].Subject != "hcpbot.audit.mgmt-2" {
		t.Fatalf("after deleting seq 4: %+v", r)
	}
	if !strings.Contains(r.Problems[0].Detail, "seq 4") || !strings.Contains(r.Problems[0].Detail, "seq 2") {
		t.Errorf("detail %q does not name the missing and the previous record", r.Problems[0].Detail)
	}

	// The Log's cached head of mgmt-1 (5) goes; it chains onto what is
	// there (3). Removing a subject's newest record is invisible to the
	// chain: that is what the stream's deny-delete is for.
	if err := s.DeleteMsg(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, audit.Record{Kind: audit.KindExecuted, Source: "mgmt-1"}); err != nil {
		t.Fatal(err)
	}
	if seq, _ := last(t, s, "hcpbot.audit.mgmt-1"); seq != 7 {
		t.Fatalf("append after the head went: seq %d", seq)
	}
	if r := verify(t, l, signer.PublicKey()); r.ProblemCount != 1 {
		t.Fatalf("after the tail removal: %v", r.Problems)
	}
}

// The trail as the server ages it out: the oldest records of a subject go
// by MaxAge, the survivors name a predecessor before the stream's first
// sequence, and that is fine.
func TestAuditVerifyAfterMaxAge(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	const maxAge = 2 * time.Second
	l := openLog(t, c.JS, audit.WithMaxAge(maxAge), audit.WithDuplicateWindow(time.Second))
	s := auditStream(t, c.JS)
	if err := l.Append(ctx, audit.Record{Kind: audit.KindProposed}); err != nil {
		t.Fatal(err)
	}
	// Keep appending until the first record has aged out while a later
	// one survives; the wait is bounded, not timed.
	deadline := time.Now().Add(natstest.Timeout)
	for {
		if err := l.Append(ctx, audit.Record{Kind: audit.KindExecuted}); err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.FirstSeq > 1 && info.State.Msgs > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first record never aged out")
		}
		time.Sleep(maxAge / 20)
	}
	r := verify(t, l)
	mustOK(t, r)
	if r.AgedOut < 1 || r.FirstSeq < 2 {
		t.Fatalf("report %+v", r)
	}
}

// The agent's Log chains its subject like the bot's; its records need no
// signature.
func TestAuditAgentLogChains(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	signer := newSigner(t)
	bot := openLog(t, c.JS, audit.WithSigner(signer))
	agent, err := audit.ForAgent(c.JS, "mgmt-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := agent.Append(ctx, audit.Record{Kind: audit.KindRefused, Reason: fmt.Sprintf("refusal %d", i)}); err != nil {
			t.Fatal(err)
		}
		if err := bot.Append(ctx, audit.Record{Kind: audit.KindProposed, Source: "mgmt-1"}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := bot.Since(ctx, time.Time{}, "hcpbot.audit.mgmt-1.agent")
	if err != nil || len(recs) != 5 {
		t.Fatalf("agent records: %d, %v", len(recs), err)
	}
	for i, r := range recs {
		if r.Chain != audit.ChainVersion || r.Key != "" || (i == 0) != (r.PrevSeq == 0) || (i > 0 && r.PrevSeq != recs[i-1].Seq) {
			t.Fatalf("agent record %d: %+v", i, r)
		}
	}
	r := verify(t, bot, signer.PublicKey())
	mustOK(t, r)
	if r.Subjects != 2 || r.Signed != 5 {
		t.Fatalf("report %+v", r)
	}
	// Its reads fail: the agent does not read the trail.
	if _, err := agent.Verify(ctx, audit.VerifyOptions{}); err == nil {
		t.Error("the agent's Log verified")
	}
	if _, err := agent.Since(ctx, time.Time{}); err == nil {
		t.Error("the agent's Log read")
	}
}

// Records written before the chain existed are counted, not reported,
// and the first chained record names the last of them.
func TestAuditVerifyLegacyRecords(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	const subject = "hcpbot.audit.bot"
	for i := range 2 {
		old, _ := json.Marshal(audit.Record{ID: fmt.Sprintf("old-%d", i), Kind: audit.KindApproved, Source: "bot", Time: time.Now().UTC()})
		publish(t, c.JS, subject, old)
	}
	if err := l.Append(ctx, audit.Record{Kind: audit.KindProposed}); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Recent(ctx, 1)
	if err != nil || recs[0].PrevSeq != 2 {
		t.Fatalf("first chained record %+v, %v; want it to name seq 2", recs, err)
	}
	r := verify(t, l)
	mustOK(t, r)
	if r.Legacy != 2 || r.Records != 3 {
		t.Fatalf("report %+v", r)
	}
}

// Since reads a whole span, far past what Recent is asked for, oldest
// first, filtered by subject, and says when it stopped short.
func TestAuditSince(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	for i := range 100 {
		if err := l.Append(ctx, audit.Record{ID: fmt.Sprintf("before-%d", i), Kind: audit.KindProposed}); err != nil {
			t.Fatal(err)
		}
	}
	// Stored times are the server's clock, which is this process's.
	time.Sleep(5 * time.Millisecond)
	start := time.Now()
	time.Sleep(5 * time.Millisecond)
	const n = 700
	for i := range n {
		if err := l.Append(ctx, audit.Record{ID: fmt.Sprintf("r-%d", i), Kind: audit.KindExecuted, Source: []string{"mgmt-1", "mgmt-2"}[i%2]}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := l.Since(ctx, start)
	if err != nil || len(recs) != n {
		t.Fatalf("Since: %d records, %v; want %d", len(recs), err, n)
	}
	for i, r := range recs {
		if r.ID != fmt.Sprintf("r-%d", i) {
			t.Fatalf("Since[%d] = %s", i, r.ID)
		}
	}
	recs, err = l.Since(ctx, start, "hcpbot.audit.mgmt-2")
	if err != nil || len(recs) != n/2 || recs[0].ID != "r-1" {
		t.Fatalf("Since on mgmt-2: %d records, %v", len(recs), err)
	}
	if recs, err := l.Since(ctx, time.Now().Add(time.Hour)); err != nil || len(recs) != 0 {
		t.Fatalf("Since the future: %d, %v", len(recs), err)
	}
	audit.SetMaxSince(l, 250)
	recs, err = l.Since(ctx, start)
	if !errors.Is(err, audit.ErrTooMany) || len(recs) != 250 || recs[249].ID != "r-249" {
		t.Fatalf("bounded Since: %d records, %v", len(recs), err)
	}
}

// The verifier exports what it found, and a caller that asks while a
// verification runs gets the next one's answer.
func TestAuditVerifierMetrics(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	signer := newSigner(t)
	l := openLog(t, c.JS, audit.WithSigner(signer))
	for range 3 {
		if err := l.Append(ctx, audit.Record{Kind: audit.KindProposed}); err != nil {
			t.Fatal(err)
		}
	}
	reg := newRegistry()
	m, err := audit.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	v := audit.NewVerifier(l, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}}, m, natstest.Logger(t))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- v.Run(runCtx, time.Hour, func() bool { return true }) }()
	waitGauge(t, reg, "hcpbot_audit_verify_records", 3)
	if got := gauge(t, reg, "hcpbot_audit_verify_problems"); got != 0 {
		t.Fatalf("problems gauge %v", got)
	}
	if ts := gauge(t, reg, "hcpbot_audit_verify_last_timestamp_seconds"); time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Fatalf("last verification at %v", ts)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	publish(t, c.JS, "hcpbot.audit.bot", []byte("garbage"))
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			r, err := v.Verify(ctx)
			if err != nil || r.ProblemCount != 1 {
				t.Errorf("Verify: %+v, %v", r, err)
			}
		})
	}
	wg.Wait()
	if got := gauge(t, reg, "hcpbot_audit_verify_problems"); got != 1 {
		t.Fatalf("problems gauge %v after a forgery", got)
	}
	if err := v.Run(ctx, 0, nil); err == nil {
		t.Error("Run accepted a zero interval")
	}
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func waitGauge(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(natstest.Timeout)
	for gauge(t, reg, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, gauge(t, reg, name), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkAuditAppend is one signed, uncontended append: one publish.
func BenchmarkAuditAppend(b *testing.B) {
	c := connect(b)
	l := openLog(b, c.JS, audit.WithSigner(newSigner(b)))
	ctx := context.Background()
	for b.Loop() {
		if err := l.Append(ctx, audit.Record{Kind: audit.KindExecuted, ActionID: "act-aaaa", Summary: "added kubernetes to noProxy"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuditVerify verifies a trail of 5,000 signed records; the
// per-record cost is what an hourly verification of a large trail pays.
func BenchmarkAuditVerify(b *testing.B) {
	c := connect(b)
	signer := newSigner(b)
	l := openLog(b, c.JS, audit.WithSigner(signer))
	ctx := context.Background()
	const n = 5000
	for i := range n {
		if err := l.Append(ctx, audit.Record{Kind: audit.KindExecuted, Source: fmt.Sprintf("mgmt-%d", i%10), Summary: "added kubernetes to noProxy"}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		r, err := l.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
		if err != nil || !r.OK() || r.Records != n {
			b.Fatalf("%+v, %v", r, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/record")
}
