package silence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// Attacks on the silences' seal, second round (issue 30), on the shipped
// permission split as in i30_attack_test.go.

// sealRaw seals body, given as bytes, under key with signer: what the
// holder of a key can make, JSON tricks included.
func sealRaw(t *testing.T, signer silence.Signer, key, body string) []byte {
	t.Helper()
	sig, err := signer.Sign([]byte(silence.SigningContext + key + "\n" + body))
	if err != nil {
		t.Fatal(err)
	}
	return mustJSON(t, envelope{Silence: []byte(body), Key: signer.PublicKey(), Sig: sig})
}

// forgedClaim is an audit record claiming that silence id muted cluster
// until until, as the bot's chained records look, naming the bot's key
// over a signature bytes of the writer's own: what a NATS user that
// appends to the trail without the signing key can write.
func (e *sealedEnv) forgedClaim(id string, until time.Time) []byte {
	now := e.clock.Now()
	return mustJSON(e.t, audit.Record{ID: id + ".silenced", Time: now, Actor: user, Kind: audit.KindSilenced, ActionID: id, Source: "mgmt-a", Cluster: "clusters/example",
		Summary: "silenced cluster " + cluster + " for 1h0m0s, until " + until.Format(time.RFC3339),
		Chain:   audit.ChainVersion, Key: e.signer.PublicKey(), Sig: []byte("not a signature of " + id)})
}

// claimer returns what appends forgedClaim records to the bot's audit
// subject of mgmt-a as the bot's NATS user (its seed stolen).
func (e *sealedEnv) claimer() func(id string, until time.Time) {
	e.t.Helper()
	attacker := e.conn(bus.BotRole())
	subject, err := event.AuditSubject("mgmt-a")
	if err != nil {
		e.t.Fatal(err)
	}
	return func(id string, until time.Time) {
		e.t.Helper()
		if _, err := attacker.JS.Publish(testContext(e.t), subject, e.forgedClaim(id, until)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// deletedThenStarted has s make a silence, purges it from the bucket and
// starts a replica, which lists it as missing once it compared the trail
// with the bucket: what shows that the comparison ran.
func (e *sealedEnv) deletedThenStarted(s *silence.Store) (*silence.Store, silence.Silence) {
	e.t.Helper()
	ctx := testContext(e.t)
	now := e.clock.Now()
	g, err := s.Add(ctx, silence.Silence{Cluster: other, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.kv.Purge(ctx, g.ID); err != nil {
		e.t.Fatal(err)
	}
	later, _ := e.replica()
	refusedEventually(e.t, later, now, g.ID, "missing from the bucket, yet the audit trail records")
	return later, g
}

// replicaOnly is a replica, its log dropped.
func (e *sealedEnv) replicaOnly() *silence.Store {
	e.t.Helper()
	s, _ := e.replica()
	return s
}

func notRefused(t *testing.T, s *silence.Store, now time.Time, key string) {
	t.Helper()
	list, _ := s.Refused(now)
	for _, r := range list {
		if r.Key == key {
			t.Errorf("%s listed: %+v", key, r)
		}
	}
}

// An old signing key, stolen, still listed in approvals.trustedKeys
// during a rotation: it seals silences the bot believes (documented: its
// holder is the bot for silences until the key is removed). What it must
// not get is a silence longer than the maximum from now: the maximum
// counts from CreatedAt, which the sealer writes — a silence "made" in
// 300 days applied from now until 307 days on (every replica, every
// restart: the record stays in the bucket for its TTL and is put again).
// JSON tricks inside a seal it makes (duplicate fields, case variants,
// time zones, huge years) each decode to one silence that the checks
// judge as decoded.
func TestI30AttackStolenTrustedKeySealsLongSilence(t *testing.T) {
	e := newSealedEnv(t)
	now := e.clock.Now()
	stolen, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	ts := func(tm time.Time) string { return tm.Format(time.RFC3339) }
	future := now.Add(300 * 24 * time.Hour)
	within := now.Add(6 * 24 * time.Hour)
	tricks := []struct {
		name, key, body, want string
	}{
		{"made in the future", "sil-ffffffffff", fmt.Sprintf(`{"id":"sil-ffffffffff","cluster":%q,"createdBy":%q,"createdAt":%q,"expiresAt":%q}`,
			cluster, user, ts(future), ts(future.Add(7*24*time.Hour))), "later than now"},
		{"expiry given twice, the last 30 days on", "sil-dddddddddd", fmt.Sprintf(`{"id":"sil-dddddddddd","cluster":%q,"createdBy":%q,"createdAt":%q,"expiresAt":%q,"expiresAt":%q}`,
			cluster, user, ts(now), ts(within), ts(now.Add(30*24*time.Hour))), "longer than the maximum"},
		{"case variant of the expiry, after it", "sil-cccccccccc", fmt.Sprintf(`{"id":"sil-cccccccccc","cluster":%q,"createdBy":%q,"createdAt":%q,"expiresAt":%q,"ExpiresAt":%q}`,
			cluster, user, ts(now), ts(within), ts(now.Add(30*24*time.Hour))), "longer than the maximum"},
		{"time zones: created at +14:00, expiring at -12:00", "sil-zzzzzzzzzz", fmt.Sprintf(`{"id":"sil-zzzzzzzzzz","cluster":%q,"createdBy":%q,"createdAt":%q,"expiresAt":%q}`,
			cluster, user, now.In(time.FixedZone("", 14*3600)).Format(time.RFC3339),
			now.Add(7*24*time.Hour+26*time.Hour).In(time.FixedZone("", -12*3600)).Format("2006-01-02T15:04:05-07:00")), "longer than the maximum"},
		{"year 9999", "sil-yyyyyyyyyy", fmt.Sprintf(`{"id":"sil-yyyyyyyyyy","cluster":%q,"createdBy":%q,"createdAt":%q,"expiresAt":"9999-12-31T23:59:59Z"}`,
			cluster, user, ts(now)), "longer than the maximum"},
		{"huge number for a time", "sil-hhhhhhhhhh", fmt.Sprintf(`{"id":"sil-hhhhhhhhhh","cluster":%q,"createdBy":%q,"createdAt":%q,"expiresAt":1e999}`,
			cluster, user, ts(now)), "does not decode"},
		{"unknown field pretending to be an override", "sil-uuuuuuuuuu", fmt.Sprintf(`{"id":"sil-uuuuuuuuuu","cluster":%q,"createdBy":%q,"createdAt":%q,"expiresAt":%q,"maxDuration":"8760h","cluster ":%q}`,
			other, user, ts(now), ts(now.Add(8*24*time.Hour)), cluster), "longer than the maximum"},
	}
	for _, tr := range tricks {
		e.put(tr.key, sealRaw(t, stolen.ForSilences(), tr.key, tr.body))
	}
	s, log := e.replica(stolen.PublicKey())
	for _, tr := range tricks {
		r := refusedEventually(t, s, now, tr.key, tr.want)
		if r.Kept != nil || r.Missing {
			t.Errorf("%s: refused as a genuine silence: %+v", tr.name, r)
		}
	}
	for _, at := range []time.Time{now, now.Add(8 * 24 * time.Hour), future.Add(time.Hour)} {
		if got, ok := s.Match(cluster, "", at); ok {
			t.Errorf("the stolen key's silence mutes %s at %s: %+v", cluster, at, got)
		}
	}
	if !strings.Contains(log.String(), "later than now") {
		t.Errorf("the silence made in the future not logged:\n%s", log)
	}

	// What the stolen key can do, as documented: a silence within the
	// maximum from now applies.
	ok := silence.Silence{ID: "sil-oooooooooo", Cluster: other, CreatedBy: user, CreatedAt: now, ExpiresAt: within}
	value, err := silence.Seal(stolen.ForSilences(), ok)
	if err != nil {
		t.Fatal(err)
	}
	e.put(ok.ID, value)
	testenv.Eventually(t, 10*time.Second, "the trusted key's silence within the maximum applies", func() bool {
		_, found := s.Match(other, "", now)
		return found
	})
	// A replica whose clock is 2 minutes ahead makes a silence: the
	// others apply it (replicas' clocks differ by seconds, not minutes).
	ahead, err := silence.NewStore(testContext(t), e.conn(bus.BotRole()).JS, e.trail,
		silence.WithClock(func() time.Time { return e.clock.Now().Add(2 * time.Minute) }), silence.WithSigner(e.signer.ForSilences()))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ahead.Add(testContext(t), silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a silence made by a replica 2 minutes ahead applies", func() bool {
		_, found := s.Match("", inc, now)
		return found
	})
	notRefused(t, s, now, g.ID)
}

// The bot's NATS seed appends, before a genuine silence is made, more
// made-up silence records to the trail than a replica lists (chained,
// naming the bot's key, signature bytes of its own), then deletes the
// genuine silence. A replica started after must list the genuine
// silence's deletion, not 100 claims of deletions that never happened
// with the real one counted in "… and N more".
func TestI30AttackBotSeedHidesDeletionBehindForgedClaims(t *testing.T) {
	e := newSealedEnv(t)
	now := e.clock.Now()
	claim := e.claimer()
	const claims = 120
	for i := range claims {
		claim("sil-cccccccc"+string(rune('a'+i/26))+string(rune('a'+i%26)), now.Add(time.Hour))
	}
	later, genuine := e.deletedThenStarted(e.replicaOnly())
	list, more := later.Refused(now)
	if len(list) != 1 || list[0].Key != genuine.ID || more != 0 {
		t.Errorf("%d listed, %d more; want the genuine silence's deletion alone: %+v", len(list), more, list)
	}
}

// The agent's NATS user appends audit records: on its own subject only
// (bus.AgentPermissions), where a record of any kind but executed or
// refused is misplaced and not read back. Its claims of silences, naming
// the bot's key, are never listed; on the bot's subject it cannot write.
func TestI30AttackAgentSeedForgesSilenceAuditRecords(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	own, err := event.AgentAuditSubject("mgmt-a")
	if err != nil {
		t.Fatal(err)
	}
	bot, err := event.AuditSubject("mgmt-a")
	if err != nil {
		t.Fatal(err)
	}
	for i, subject := range []string{own, bot} {
		id := fmt.Sprintf("sil-agent%05d", i)
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := e.agent.JS.Publish(pctx, subject, e.forgedClaim(id, now.Add(time.Hour)))
		cancel()
		if subject == bot && err == nil {
			t.Error("the agent's user wrote the bot's audit subject")
		}
		if subject == own && err != nil {
			t.Fatalf("the agent's own audit subject: %v", err)
		}
	}
	later, _ := e.deletedThenStarted(e.replicaOnly())
	notRefused(t, later, now, "sil-agent00000")
	notRefused(t, later, now, "sil-agent00001")
}

// Replays by the bot's NATS seed: a genuine record is bound to its key
// and carries its own expiry, so putting its bytes again — the same
// revision's bytes on top of themselves, after a delete, after it
// expired — gives nothing the bot did not give: it applies until the
// expiry it was made with, never after, and a deletion stays listed on
// the replica that saw it. Swapping two genuine silences' records
// between their keys makes both refused (the seal binds the key); the
// replicas that read them keep applying both. hcpbot has no early end
// of a silence (no `/hcp unsilence`): nothing the operator did can be
// undone by a replay.
func TestI30AttackBotSeedReplaysGenuineSilences(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	s, _ := e.replica()
	one, err := s.Add(ctx, silence.Silence{Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.Add(ctx, silence.Silence{Cluster: other, CreatedBy: user, ExpiresAt: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) []byte {
		t.Helper()
		v, err := e.kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v.Value()
	}
	oneBytes, twoBytes := get(one.ID), get(two.ID)

	// The same bytes again: a new revision, the same silence.
	e.put(one.ID, oneBytes)
	// Deleted, then put back.
	if err := e.kv.Delete(ctx, one.ID); err != nil {
		t.Fatal(err)
	}
	refusedEventually(t, s, now, one.ID, "deleted from the bucket while it applies")
	e.put(one.ID, oneBytes)
	// Swapped.
	e.put(one.ID, twoBytes)
	e.put(two.ID, oneBytes)
	refusedEventually(t, s, now, two.ID, "replaced while it applies")
	for _, sil := range []silence.Silence{one, two} {
		if got, ok := s.Match(sil.Cluster, "", now); !ok || got.ID != sil.ID || !got.ExpiresAt.Equal(sil.ExpiresAt) {
			t.Errorf("after the replays %s applies as %+v (found %v)", sil.Cluster, got, ok)
		}
	}
	later, _ := e.replica()
	refusedEventually(t, later, now, one.ID, "does not verify")
	refusedEventually(t, later, now, two.ID, "does not verify")

	// Put back as made, after it expired: it applies nowhere, on a
	// replica started then or on one running.
	e.put(one.ID, oneBytes)
	e.put(two.ID, twoBytes)
	testenv.Eventually(t, 10*time.Second, "the records put back read", func() bool {
		_, a := later.Match(cluster, "", now)
		_, b := later.Match(other, "", now)
		return a && b
	})
	e.clock.Add(2*time.Hour + time.Second)
	e.put(one.ID, oneBytes)
	e.put(two.ID, twoBytes)
	afterwards, _ := e.replica()
	at := e.clock.Now()
	// The watch delivers in order: once a silence made after the
	// replays is read, so were they.
	fresh, err := s.Add(ctx, silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: at.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*silence.Store{later, afterwards} {
		testenv.Eventually(t, 10*time.Second, "a silence made after the replays read", func() bool { _, ok := st.Match("", inc, at); return ok })
		notRefused(t, st, at, fresh.ID)
	}
	for _, st := range []*silence.Store{s, later, afterwards} {
		for _, c := range []string{cluster, other} {
			if got, ok := st.Match(c, "", at); ok {
				t.Errorf("an expired silence replayed mutes %s: %+v", c, got)
			}
		}
	}
}

// The bot's NATS seed hides a deletion from replicas started after it:
// it floods the bot's audit subjects with more records than the
// comparison reads (audit.MaxSince, the oldest first), so the record of
// a silence made after the flood is never compared; then it wipes the
// bucket with one rollup message (the KV stream allows rollups, the
// bot's user publishes on $KV.<bucket>.>): no delete marker names the
// silence. A replica started then cannot list what it never read, but
// it must say, in `/hcp status` and not only in its log, that its
// comparison was incomplete. The replica that read the silence keeps
// applying it, and lists it as tampered with: the rollup is a put, after
// which it looks up the silences it applies.
func TestI30AttackBotSeedFloodsTrailToHideDeletion(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	a := e.replicaOnly()
	attacker := e.conn(bus.BotRole())
	subject, err := event.AuditSubject("mgmt-a")
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte(`{"id":"junk","time":"` + now.Format(time.RFC3339) + `","kind":"proposed"}`)
	for i := range audit.MaxSince + 1 {
		msg := &nats.Msg{Subject: subject, Data: junk, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("junk-%d", i))
		if _, err := attacker.JS.PublishMsgAsync(msg); err != nil {
			t.Fatal(err)
		}
		// In batches: a busy machine acknowledges slowly, and too many
		// outstanding publishes stall.
		if i%500 == 499 || i == audit.MaxSince {
			select {
			case <-attacker.JS.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("the flood was not stored")
			}
		}
	}
	genuine, err := a.Add(ctx, silence.Silence{Cluster: other, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	wipe := &nats.Msg{Subject: "$KV." + silence.Bucket + ".sil-rrrrrrrrrr", Data: []byte(`{}`), Header: nats.Header{}}
	wipe.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := attacker.JS.PublishMsg(ctx, wipe); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kv.Get(ctx, genuine.ID); err == nil {
		t.Fatal("the rollup left the genuine silence in the bucket")
	}
	later := e.replicaOnly()
	r := refusedEventually(t, later, now, silence.TrailKey, "not compared whole")
	if !r.Incomplete {
		t.Errorf("refusal %+v: not marked incomplete", r)
	}
	if _, ok := a.Match(other, "", now); !ok {
		t.Error("the replica that read the silence no longer applies it")
	}
	// The replica that read it lists it: the rollup deleted it without
	// a marker, but after a put it looks its silences up.
	refusedEventually(t, a, now, genuine.ID, "removed from the bucket without a delete marker")
	// Shown until every silence it may hide expired.
	if list, _ := later.Refused(now.Add(silence.DefaultMaxDuration - time.Minute)); len(list) == 0 || list[0].Key != silence.TrailKey {
		t.Errorf("a week on, refusals %+v: want the incomplete comparison first", list)
	}
}

// The bot's NATS seed writes one key again and again (two junk values in
// turn), and deletes a genuine silence again and again, putting its
// record back in between: each write is read and refused, but the log
// gets a line when a record is first listed and then one per power of
// ten of repeats, not one per write (the limit on distinct records,
// TestI30AttackRefusalsBounded, said nothing of one key written often).
func TestI30AttackBotSeedLoopsOneKeyToFloodTheLog(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	a := e.replicaOnly()
	b, bLog := e.replica()
	genuine, stored, _ := e.made(a, silence.Silence{Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	testenv.Eventually(t, 10*time.Second, "b reads the genuine silence", func() bool { _, ok := b.Match(cluster, "", now); return ok })
	const writes = 300
	for i := range writes {
		e.put("sil-llllllllll", []byte(fmt.Sprintf(`{"id":"junk %d"}`, i%2)))
		if i%6 == 0 {
			if err := e.kv.Delete(ctx, genuine.ID); err != nil {
				t.Fatal(err)
			}
			e.put(genuine.ID, stored)
		}
	}
	// The watch delivers in order: a silence made after the loop, once
	// read, means every write of it was.
	last, err := a.Add(ctx, silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "b reads the last silence", func() bool { got, ok := b.Match("", inc, now); return ok && got.ID == last.ID })
	refusedEventually(t, b, now, "sil-llllllllll", "not sealed")
	refusedEventually(t, b, now, genuine.ID, "deleted from the bucket while it applies")
	if n := strings.Count(bLog.String(), `"level":"error"`); n > 10 {
		t.Errorf("%d error lines for %d writes to two keys:\n%.3000s", n, writes+2*writes/6, bLog)
	}
	if _, ok := b.Match(cluster, "", now); !ok {
		t.Error("the genuine silence no longer applies")
	}
}

// JSON tricks on the envelope, by the bot's NATS seed (what is outside
// the seal is its to write): the silence given twice (the genuine one
// first or last), in a case variant, a signature that is no string,
// trailing bytes, fields of a silence beside the seal. The seal is
// checked over the very bytes that are decoded, so each either is the
// genuine silence under its own key, unchanged, or silences nothing.
func TestI30AttackBotSeedEnvelopeTricks(t *testing.T) {
	e := newSealedEnv(t)
	now := e.clock.Now()
	s := e.replicaOnly()
	genuine, stored, real := e.made(s, silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	muting := func(id string, until time.Time) string {
		return string(mustJSON(t, silence.Silence{ID: id, Cluster: other, CreatedBy: user, CreatedAt: now, ExpiresAt: until}))
	}
	sig := string(mustJSON(t, real.Sig))
	tricks := []struct{ key, value, want string }{
		// The genuine seal, the forged silence after it: the last is decoded.
		{"sil-aaaaaaaaaa", `{"silence":` + string(real.Silence) + `,"key":"` + real.Key + `","sig":` + sig + `,"silence":` + muting("sil-aaaaaaaaaa", now.Add(time.Hour)) + `}`, "does not verify"},
		{"sil-bbbbbbbbbb", `{"silence":` + string(real.Silence) + `,"key":"` + real.Key + `","sig":` + sig + `,"SILENCE":` + muting("sil-bbbbbbbbbb", now.Add(time.Hour)) + `}`, "does not verify"},
		{"sil-cccccccccc", `{"silence":` + string(real.Silence) + `,"key":"` + real.Key + `","sig":12345}`, "not sealed"},
		{"sil-dddddddddd", string(stored) + `{"silence":` + muting("sil-dddddddddd", now.Add(time.Hour)) + `}`, "not sealed"},
		{"sil-eeeeeeeeee", `{"id":"sil-eeeeeeeeee","cluster":"` + other + `","createdBy":"` + user + `","createdAt":"` + now.Format(time.RFC3339) + `","expiresAt":"` + now.Add(time.Hour).Format(time.RFC3339) + `","silence":` + string(real.Silence) + `,"key":"` + real.Key + `","sig":` + sig + `}`, "does not verify"},
	}
	for _, tr := range tricks {
		e.put(tr.key, []byte(tr.value))
	}
	// Under the genuine key: the forged silence first, the genuine last
	// — the genuine silence, unchanged; no refusal, nothing else muted.
	e.put(genuine.ID, []byte(`{"silence":`+muting(genuine.ID, now.Add(6*24*time.Hour))+`,"silence":`+string(real.Silence)+`,"key":"`+real.Key+`","sig":`+sig+`}`))
	later := e.replicaOnly()
	for _, st := range []*silence.Store{s, later} {
		for _, tr := range tricks {
			refusedEventually(t, st, now, tr.key, tr.want)
		}
		if got, ok := st.Match(other, "", now); ok {
			t.Errorf("an envelope trick mutes %s: %+v", other, got)
		}
		if got, ok := st.Match("", inc, now); !ok || got.ID != genuine.ID || !got.ExpiresAt.Equal(genuine.ExpiresAt) {
			t.Errorf("the genuine silence reads as %+v (%v)", got, ok)
		}
		notRefused(t, st, now, genuine.ID)
	}
}

// The bot's NATS seed, once a replica started after a deletion lists
// the genuine silence as missing, puts a junk record under its key: the
// listing must stay "deleted" (a genuine silence, rank 1), not become
// one more refused record among a hundred (what a flood of junk then
// drowns).
func TestI30AttackBotSeedOverwritesMissingListing(t *testing.T) {
	e := newSealedEnv(t)
	now := e.clock.Now()
	a := e.replicaOnly()
	if _, err := a.Add(testContext(t), silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	later, g := e.deletedThenStarted(a)
	e.put(g.ID, []byte(`{"id":"`+g.ID+`"}`))
	for i := range 120 {
		e.put(fmt.Sprintf("sil-junk%06d", i), []byte(`{}`))
	}
	testenv.Eventually(t, 10*time.Second, "the junk read", func() bool { list, more := later.Refused(now); return len(list)+more >= 121 })
	list, _ := later.Refused(now)
	if len(list) == 0 || list[0].Key != g.ID || !list[0].Missing {
		t.Errorf("first listed %+v; want %s missing", list[0], g.ID)
	}
	if _, ok := later.Match("", inc, now); !ok {
		t.Error("the silence not deleted does not apply")
	}
}

// The bot's NATS seed replays genuine, signed silence records of the
// trail (their bytes published again): of a silence still in the bucket,
// and of one that expired. The comparison lists neither — the first is
// there, the second no longer matters — and a replay of the record of a
// silence really deleted lists it once.
func TestI30AttackBotSeedReplaysAuditRecords(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	a := e.replicaOnly()
	kept, err := a.Add(ctx, silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	short, err := a.Add(ctx, silence.Silence{Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := e.trail.Recent(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	attacker := e.conn(bus.BotRole())
	for _, r := range recs {
		subject, err := event.AuditSubject(r.Source)
		if err != nil {
			subject, _ = event.AuditSubject("mgmt-a")
		}
		for range 3 {
			if _, err := attacker.JS.Publish(ctx, subject, mustJSON(t, r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.clock.Add(2 * time.Minute) // short expired
	later, deleted := e.deletedThenStarted(a)
	at := e.clock.Now()
	list, more := later.Refused(at)
	if len(list) != 1 || list[0].Key != deleted.ID || more != 0 {
		t.Errorf("listed %+v (%d more); want %s alone, not %s nor %s", list, more, deleted.ID, kept.ID, short.ID)
	}
	// A replay of the deleted silence's record, the replica started
	// after it: listed once.
	recs, err = e.trail.Recent(ctx, 1)
	if err != nil || len(recs) != 1 || recs[0].ActionID != deleted.ID {
		t.Fatalf("newest record %+v, %v", recs, err)
	}
	subject, _ := event.AuditSubject(recs[0].Source)
	if _, err := attacker.JS.Publish(ctx, subject, mustJSON(t, recs[0])); err != nil {
		t.Fatal(err)
	}
	third := e.replicaOnly()
	refusedEventually(t, third, at, deleted.ID, "missing from the bucket")
	if list, _ := third.Refused(at); len(list) != 1 {
		t.Errorf("listed %+v; want the deleted silence once", list)
	}
}
