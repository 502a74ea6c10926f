package silence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// Attacks on the silences (issue 30), each naming its attacker of
// docs/security.md, on the product's embedded server (bus.StartLocal:
// each role with the shipped permission split).

// sealedEnv is a shipped NATS server, the bot's signing key, its audit
// trail signed with it, and the bucket as the bot's NATS user sees it —
// which is what a stolen bot NATS seed sees.
type sealedEnv struct {
	t      *testing.T
	local  *bus.Local
	signer *approval.Signer
	trail  *audit.Log
	kv     jetstream.KeyValue // the attacker's handle: the bot's user
	agent  *bus.Conn
	clock  *clock
}

func newSealedEnv(t *testing.T) *sealedEnv {
	t.Helper()
	ctx := testContext(t)
	l, err := bus.StartLocal(ctx, bus.LocalConfig{StoreDir: t.TempDir(), Agents: []string{"mgmt-a"}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Shutdown)
	e := &sealedEnv{t: t, local: l, clock: &clock{t: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}}
	if e.signer, err = approval.NewEphemeralSigner(); err != nil {
		t.Fatal(err)
	}
	bot := e.conn(bus.BotRole())
	if e.trail, err = audit.Open(ctx, bot.JS, audit.WithSigner(e.signer.ForAudit())); err != nil {
		t.Fatal(err)
	}
	if e.kv, err = bus.EnsureKV(ctx, bot.JS, bus.SilencesKV(2*silence.DefaultMaxDuration+24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.agent = e.conn(bus.AgentRole("mgmt-a"))
	return e
}

func (e *sealedEnv) conn(role bus.Role) *bus.Conn {
	e.t.Helper()
	c, err := e.local.Connect(testContext(e.t), role, bus.Config{Name: e.t.Name() + "-" + role.String()}, natstest.Logger(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// replica is a bot replica sealing with the bot's key (and trusting
// trusted besides), running until the test ends; its log is returned.
func (e *sealedEnv) replica(trusted ...string) (*silence.Store, *syncbuf.Buffer) {
	e.t.Helper()
	var buf syncbuf.Buffer
	s, err := silence.NewStore(testContext(e.t), e.conn(bus.BotRole()).JS, e.trail, silence.WithClock(e.clock.Now),
		silence.WithSigner(e.signer.ForSilences(), trusted...), silence.WithLogger(zerolog.New(&buf)))
	if err != nil {
		e.t.Fatal(err)
	}
	run(e.t, s)
	return s, &buf
}

func run(t *testing.T, s *silence.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// refusedEventually waits until s lists key as refused, with a reason
// containing want, and returns it.
func refusedEventually(t *testing.T, s *silence.Store, now time.Time, key, want string) silence.Refusal {
	t.Helper()
	var got silence.Refusal
	testenv.Eventually(t, 10*time.Second, "refusal of "+key+" ("+want+")", func() bool {
		list, _ := s.Refused(now)
		for _, r := range list {
			if r.Key == key && strings.Contains(r.Reason, want) {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

func (e *sealedEnv) put(key string, value []byte) {
	e.t.Helper()
	if _, err := e.kv.Put(testContext(e.t), key, value); err != nil {
		e.t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// made has s add sil and returns it, the record stored and its seal,
// checked to be the bot's.
func (e *sealedEnv) made(s *silence.Store, sil silence.Silence) (silence.Silence, []byte, envelope) {
	e.t.Helper()
	ctx := testContext(e.t)
	sil, err := s.Add(ctx, sil)
	if err != nil {
		e.t.Fatal(err)
	}
	stored, err := e.kv.Get(ctx, sil.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	var real envelope
	if err := json.Unmarshal(stored.Value(), &real); err != nil || real.Key != e.signer.PublicKey() {
		e.t.Fatalf("stored record is not sealed by the bot: %s (%v)", stored.Value(), err)
	}
	return sil, stored.Value(), real
}

// envelope is a sealed record as Seal writes it, for forgeries.
type envelope struct {
	Silence json.RawMessage `json:"silence"`
	Key     string          `json:"key"`
	Sig     []byte          `json:"sig"`
}

// The bot's NATS user, its seed stolen without the signing key: it
// writes the silences bucket (bus.BotPermissions) and, before the seal,
// muted any hosted cluster or incident with one put — an outage nobody
// on call was told about, and no audit record. Now each of its records
// silences nothing, on a running replica and on one started after; each
// is logged as an error and listed by Refused (shown in `/hcp status`).
// Forgeries: unsealed (the shape an hcpbot of before sealing wrote);
// sealed by the attacker's own key; a genuine seal over an edited
// silence; a genuine silence moved under another key, as is and with its
// id edited to match (the seal binds the key); the bot's signatures of
// another kind (checkpoint, audit record) over the very bytes; a sealed
// silence longer than the maximum, invalid fields, a huge record.
func TestI30AttackBotSeedWritesSilence(t *testing.T) {
	e := newSealedEnv(t)
	now := e.clock.Now()
	running, log := e.replica()

	genuine, stored, real := e.made(running, silence.Silence{Cluster: cluster, CreatedBy: user, Reason: "upgrade", ExpiresAt: now.Add(time.Hour)})

	attacker, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	muteOther := func(id string) silence.Silence {
		return silence.Silence{ID: id, Cluster: other, CreatedBy: user, Reason: "nothing to see", CreatedAt: now, ExpiresAt: now.Add(6 * 24 * time.Hour)}
	}
	otherOf := func(sig silence.Signer, id string) []byte {
		b, err := silence.Seal(sig, muteOther(id))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The bot's key, used for another kind of seal over the same bytes:
	// what the attacker could find in a checkpoint or the trail.
	otherKind := func(id, context string, sign func([]byte) ([]byte, error)) []byte {
		body := mustJSON(t, muteOther(id))
		sig, err := sign(append([]byte(context+id+"\n"), body...))
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, envelope{Silence: body, Key: e.signer.PublicKey(), Sig: sig})
	}
	edited := func(id string) []byte {
		var sil silence.Silence
		if err := json.Unmarshal(real.Silence, &sil); err != nil {
			t.Fatal(err)
		}
		sil.ID, sil.Cluster = id, other
		return mustJSON(t, envelope{Silence: mustJSON(t, sil), Key: real.Key, Sig: real.Sig})
	}
	forgeries := []struct {
		name, key string
		value     []byte
		want      string
	}{
		{"unsealed", "sil-aaaaaaaaaa", mustJSON(t, muteOther("sil-aaaaaaaaaa")), "not sealed"},
		{"attacker's key", "sil-bbbbbbbbbb", otherOf(attacker.ForSilences(), "sil-bbbbbbbbbb"), "not trusted"},
		{"genuine seal, silence edited", genuine.ID[:4] + "cccccccccc", edited(genuine.ID[:4] + "cccccccccc"), "does not verify"},
		{"genuine silence moved to another key", "sil-dddddddddd", stored, "does not verify"},
		{"checkpoint signature", "sil-eeeeeeeeee", otherKind("sil-eeeeeeeeee", checkpoint.SigningContext, e.signer.ForCheckpoints().Sign), "does not verify"},
		{"audit signature", "sil-ffffffffff", otherKind("sil-ffffffffff", audit.SigningContext, e.signer.ForAudit().Sign), "does not verify"},
		{"no signature", "sil-gggggggggg", mustJSON(t, envelope{Silence: mustJSON(t, muteOther("sil-gggggggggg")), Key: e.signer.PublicKey()}), "not sealed"},
		{"huge", "sil-hhhhhhhhhh", mustJSON(t, envelope{Silence: mustJSON(t, strings.Repeat("x", 20<<10))}), "bytes"},
	}
	for _, f := range forgeries {
		e.put(f.key, f.value)
	}
	// A replica started after the forgeries reads them at once.
	later, laterLog := e.replica()
	for _, s := range []*silence.Store{running, later} {
		for _, f := range forgeries {
			refusedEventually(t, s, now, f.key, f.want)
		}
		if got, ok := s.Match(other, "", now); ok {
			t.Errorf("a forged silence mutes %s: %+v", other, got)
		}
		if got := s.Active(now); len(got) != 1 || got[0].ID != genuine.ID {
			t.Errorf("active silences %+v, want only %s", got, genuine.ID)
		}
	}
	for _, l := range []*syncbuf.Buffer{log, laterLog} {
		if n := strings.Count(l.String(), `"level":"error"`); n < len(forgeries) {
			t.Errorf("%d errors logged for %d forgeries:\n%s", n, len(forgeries), l)
		}
	}
	// The genuine silence reached the replica started later.
	if _, ok := later.Match(cluster, "", now); !ok {
		t.Error("the genuine silence does not apply on a replica started later")
	}
}

// The same attacker deletes, purges or replaces a genuine silence that
// applies (before the seal: the outage it muted is posted again — or,
// replaced, muted for a week). The bot never deletes or edits a silence,
// so each is an attack: the replicas that read the silence keep applying
// it until it expires and list what happened (`/hcp status`), logged as
// an error. A deletion cannot be proven by a seal: a replica started
// after it never sees the silence; what holds it is the signed audit
// record of its creation, which names it, its target and its expiry.
func TestI30AttackBotSeedDeletesSilence(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	a, aLog := e.replica()
	b, _ := e.replica()
	var sils []silence.Silence
	for _, target := range []string{cluster, other, "mgmt-a/clusters/third"} {
		sil, err := a.Add(ctx, silence.Silence{Cluster: target, CreatedBy: user, ExpiresAt: now.Add(2 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		sils = append(sils, sil)
	}
	for _, sil := range sils {
		testenv.Eventually(t, 10*time.Second, "replica b reads "+sil.ID, func() bool { _, ok := b.Match(sil.Cluster, "", now); return ok })
	}
	if err := e.kv.Delete(ctx, sils[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.kv.Purge(ctx, sils[1].ID); err != nil {
		t.Fatal(err)
	}
	attacker, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	shorter := sils[2]
	shorter.ExpiresAt = now.Add(time.Minute)
	value, err := silence.Seal(attacker.ForSilences(), shorter)
	if err != nil {
		t.Fatal(err)
	}
	e.put(sils[2].ID, value)
	// A record that was never a silence, written and deleted.
	e.put("sil-zzzzzzzzzz", []byte(`{}`))
	if err := e.kv.Delete(ctx, "sil-zzzzzzzzzz"); err != nil {
		t.Fatal(err)
	}

	for _, s := range []*silence.Store{a, b} {
		refusedEventually(t, s, now, sils[0].ID, "deleted from the bucket while it applies")
		refusedEventually(t, s, now, sils[1].ID, "deleted from the bucket while it applies")
		testenv.Eventually(t, 10*time.Second, "the junk record's deletion read", func() bool {
			list, _ := s.Refused(now)
			for _, r := range list {
				if r.Key == "sil-zzzzzzzzzz" && r.Deleted {
					return true
				}
			}
			return false
		})
		r := refusedEventually(t, s, now, sils[2].ID, "replaced while it applies")
		if r.Kept == nil || !r.Kept.ExpiresAt.Equal(sils[2].ExpiresAt) {
			t.Errorf("replacement: kept %+v", r.Kept)
		}
		for _, sil := range sils {
			if got, ok := s.Match(sil.Cluster, "", now.Add(time.Hour)); !ok || got.ID != sil.ID {
				t.Errorf("%s no longer applies after the attack: %+v", sil.ID, got)
			}
		}
	}
	if !strings.Contains(aLog.String(), "deleted from the bucket while it applies") {
		t.Errorf("deletion not logged:\n%s", aLog)
	}
	// Once expired, a deleted silence is no longer listed; a deleted
	// record a day after.
	if list, _ := a.Refused(now.Add(25 * time.Hour)); len(list) != 0 {
		t.Errorf("refusals after the silences expired: %+v", list)
	}

	// A replica started after the attack never read the deleted
	// silences: the trail's signed records name them, and it lists them.
	c, _ := e.replica()
	refusedEventually(t, c, now, sils[0].ID, "missing from the bucket, yet the audit trail records")
	refusedEventually(t, c, now, sils[1].ID, "missing from the bucket, yet the audit trail records")
	refusedEventually(t, c, now, sils[2].ID, "replaced by a record that is refused (silence sealed by a key that is not trusted")
	refusedEventually(t, c, now, "sil-zzzzzzzzzz", "deleted from the bucket by someone without the bot's key")
	for _, sil := range sils {
		if _, ok := c.Match(sil.Cluster, "", now); ok {
			t.Errorf("a replica started later applies %s, which the bucket lacks", sil.ID)
		}
	}
	// A day on: the silences expired, the deletion of what was no
	// silence shown for a day.
	if list, _ := c.Refused(now.Add(25 * time.Hour)); len(list) != 0 {
		t.Errorf("refusals of the later replica a day on: %+v", list)
	}

	// What holds: the trail's signed record of each creation.
	recs, err := e.trail.Recent(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	audited := map[string]bool{}
	for _, r := range recs {
		if r.Kind == audit.KindSilenced && r.Key == e.signer.PublicKey() && len(r.Sig) > 0 {
			audited[r.ActionID] = true
		}
	}
	for _, sil := range sils {
		if !audited[sil.ID] {
			t.Errorf("no signed audit record of %s: %+v", sil.ID, recs)
		}
	}
	report, err := e.trail.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{e.signer.PublicKey()}})
	if err != nil || !report.OK() {
		t.Errorf("the trail does not verify: %+v, %v", report, err)
	}
}

// The agent's NATS user cannot write the silences bucket at all
// (bus.AgentPermissions): a hostile agent mutes nothing, sealed or not.
func TestI30AttackAgentSeedCannotWriteSilences(t *testing.T) {
	e := newSealedEnv(t)
	s, _ := e.replica()
	now := e.clock.Now()
	ctx, cancel := context.WithTimeout(testContext(t), 3*time.Second)
	defer cancel()
	rec := mustJSON(t, silence.Silence{ID: "sil-aaaaaaaaaa", Cluster: cluster, CreatedBy: user, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	if _, err := e.agent.JS.Publish(ctx, "$KV."+silence.Bucket+".sil-aaaaaaaaaa", rec); err == nil {
		t.Error("the agent's user wrote the silences bucket")
	}
	if _, err := e.kv.Get(testContext(t), "sil-aaaaaaaaaa"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the agent's record is in the bucket: %v", err)
	}
	if _, ok := s.Match(cluster, "", now); ok {
		t.Error("the agent muted a cluster")
	}
}

// Migration: an hcpbot of before sealing stored silences as plain JSON.
// A bot with a signing key cannot tell those from a stolen seed's: it
// refuses them (listed by Refused, as "not sealed": re-create them with
// `/hcp silence`; they last a week at most). A bot without a signing key
// reads both shapes, as before; a key rotated out of trustedKeys makes
// its silences refused, and a trusted old key still gets no silence
// longer than the maximum past the check.
func TestI30SilencesMigrationAndRotation(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	// What an older hcpbot wrote (Add, before sealing).
	old, err := silence.NewStore(ctx, e.conn(bus.BotRole()).JS, e.trail, silence.WithClock(e.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if old.Sealed() {
		t.Error("a Store without a signer says it seals")
	}
	legacy, err := old.Add(ctx, silence.Silence{Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	byOld := silence.Silence{ID: "sil-oooooooooo", Incident: inc, CreatedBy: user, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	value, err := silence.Seal(rotated.ForSilences(), byOld)
	if err != nil {
		t.Fatal(err)
	}
	e.put(byOld.ID, value)
	tooLong := silence.Silence{ID: "sil-llllllllll", Cluster: other, CreatedBy: user, CreatedAt: now, ExpiresAt: now.Add(30 * 24 * time.Hour)}
	if value, err = silence.Seal(rotated.ForSilences(), tooLong); err != nil {
		t.Fatal(err)
	}
	e.put(tooLong.ID, value)

	sealing, _ := e.replica()
	if !sealing.Sealed() {
		t.Error("a Store with a signer says it does not seal")
	}
	refusedEventually(t, sealing, now, legacy.ID, "not sealed")
	refusedEventually(t, sealing, now, byOld.ID, "not trusted")
	if got := sealing.Active(now); len(got) != 0 {
		t.Errorf("a sealing replica applies %+v", got)
	}

	// During a rotation the old key is listed: its silences apply, but
	// none longer than the maximum.
	rotating, _ := e.replica(rotated.PublicKey())
	testenv.Eventually(t, 10*time.Second, "the old key's silence applies", func() bool { _, ok := rotating.Match("", inc, now); return ok })
	refusedEventually(t, rotating, now, tooLong.ID, "longer than the maximum")

	// Without a key, both shapes apply, as before sealing.
	unsealed, err := silence.NewStore(ctx, e.conn(bus.BotRole()).JS, e.trail, silence.WithClock(e.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	run(t, unsealed)
	testenv.Eventually(t, 10*time.Second, "an unsealed replica reads both shapes", func() bool {
		_, a := unsealed.Match(cluster, "", now)
		_, b := unsealed.Match("", inc, now)
		return a && b
	})
}

// The same attacker floods the bucket with junk, then deletes a genuine
// silence: what the replica keeps of its refusals stays bounded (the
// rest counted, each logged), and the genuine silence's deletion is
// listed first, never crowded out.
func TestI30AttackRefusalsBounded(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	s, _ := e.replica()
	sil, err := s.Add(ctx, silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	const junk = 150
	for i := range junk {
		e.put(fmt.Sprintf("sil-junk%06d", i), []byte(`{"id":"x"}`))
	}
	testenv.Eventually(t, 10*time.Second, "every junk record read", func() bool {
		list, more := s.Refused(now)
		return len(list)+more == junk
	})
	if err := e.kv.Delete(ctx, sil.ID); err != nil {
		t.Fatal(err)
	}
	r := refusedEventually(t, s, now, sil.ID, "deleted from the bucket while it applies")
	list, more := s.Refused(now)
	if len(list) > 100 || len(list)+more != junk+1 || list[0].Key != r.Key {
		t.Errorf("%d refusals kept, %d more, first %s; want at most 100, %d in all, the deletion first", len(list), more, list[0].Key, junk+1)
	}
	if _, ok := s.Match("", inc, now); !ok {
		t.Error("the deleted silence no longer applies")
	}
}

// The same attacker appends to the audit trail (the bot's NATS user may:
// bus.BotPermissions) records that claim silences the bucket lacks,
// naming the bot's key without its signature. A replica's comparison of
// the trail with the bucket checks each record's signature: it lists no
// such claim (a flood of them would crowd a real deletion out:
// TestI30AttackBotSeedHidesDeletionBehindForgedClaims) and applies
// nothing, and `/hcp audit verify` reports each record as forged.
func TestI30AttackBotSeedForgesSilenceAuditRecords(t *testing.T) {
	e := newSealedEnv(t)
	ctx := testContext(t)
	now := e.clock.Now()
	// The bot's chain on that subject began long ago: a genuine silence.
	s, _ := e.replica()
	if _, err := s.Add(ctx, silence.Silence{Cluster: other, CreatedBy: user, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	claim := e.claimer()
	claim("sil-pppppppppp", now.Add(time.Hour))
	claim("sil-qqqqqqqqqq", now.Add(400*24*time.Hour)) // longer than any silence

	later, _ := e.replica()
	testenv.Eventually(t, 10*time.Second, "the genuine silence read", func() bool { _, ok := later.Match(other, "", now); return ok })
	if _, ok := later.Match(cluster, "", now); ok {
		t.Error("a claim in the trail silences the cluster")
	}
	if _, ok := later.Match(other, "", now); !ok {
		t.Error("the genuine silence does not apply")
	}
	// The comparison runs once the initial values are read: a deletion
	// of the genuine silence, listed by a replica started after, shows
	// it ran and listed no claim.
	third, deleted := e.deletedThenStarted(s)
	for _, st := range []*silence.Store{later, third} {
		if list, _ := st.Refused(now); len(list) > 1 || (len(list) == 1 && list[0].Key != deleted.ID) {
			t.Errorf("refusals %+v, want no claim listed", list)
		}
	}
	report, err := e.trail.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{e.signer.PublicKey()}})
	if err != nil || report.ProblemCount < 2 {
		t.Errorf("audit verify does not report both forged records: %+v, %v", report, err)
	}
}
