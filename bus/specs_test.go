package bus

import (
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSpecsAreBounded ensures every stream and bucket hcpbot has, with its
// default settings, on a real server, and checks what the server reports:
// nothing grows without a bound (max age or TTL), KV buckets keep one value
// per key, the audit trail is append-only and refuses rather than drops,
// and a second ensure with the same spec changes nothing.
func TestSpecsAreBounded(t *testing.T) {
	ctx := testContext(t)
	c := connect(t, Config{Embedded: LocalConfig{StoreDir: t.TempDir(), Name: "specs"}})
	streams := []struct {
		spec   StreamSpec
		maxAge time.Duration
	}{
		{EventsStream(0, 0), DefaultEventsMaxAge},
		{AuditStream(0, 0), AuditMaxAge},
		{ActionsStream(), ActionsMaxAge},
	}
	// As the bot opens them: the audit stream only while absent (its user
	// may not update it), the others brought to spec.
	open := func(spec StreamSpec) (jetstream.Stream, error) {
		if spec.Name == AuditStreamName {
			return CreateStream(ctx, c.JS, spec)
		}
		return EnsureStream(ctx, c.JS, spec)
	}
	for _, tc := range streams {
		t.Run(tc.spec.Name, func(t *testing.T) {
			s, err := open(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			cfg := s.CachedInfo().Config
			if cfg.MaxAge != tc.maxAge || cfg.MaxAge <= 0 {
				t.Errorf("max age %v, want %v", cfg.MaxAge, tc.maxAge)
			}
			if cfg.Duplicates <= 0 || cfg.Duplicates > cfg.MaxAge {
				t.Errorf("duplicate window %v not within max age %v", cfg.Duplicates, cfg.MaxAge)
			}
			if cfg.Storage != jetstream.FileStorage {
				t.Errorf("storage %v, want file", cfg.Storage)
			}
			again, err := open(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if again.CachedInfo().Config.MaxAge != cfg.MaxAge || again.CachedInfo().Created != s.CachedInfo().Created {
				t.Errorf("second ensure changed the stream")
			}
		})
	}
	audit, err := c.JS.Stream(ctx, AuditStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := audit.CachedInfo().Config; !cfg.DenyDelete || !cfg.DenyPurge || cfg.Discard != jetstream.DiscardNew {
		t.Errorf("audit stream not append-only: deny delete %v, deny purge %v, discard %v", cfg.DenyDelete, cfg.DenyPurge, cfg.Discard)
	}

	buckets := []struct {
		spec KVSpec
		ttl  time.Duration
	}{
		{ProposalsKV(0), ProposalsTTL},
		{SilencesKV(48 * time.Hour), 48 * time.Hour},
		{LeasesKV(DefaultLeaseTTL), DefaultLeaseTTL},
		{SlackMessagesKV("", 0), SlackMessagesTTL},
		{SlackReplayKV(11 * time.Minute), 11 * time.Minute},
		{DigestTicksKV(), DigestTicksTTL},
		{DigestStateKV(), DigestStateTTL},
		{ActionResultsKV(), ActionResultsTTL},
		{CheckpointsKV(0), CheckpointsTTL},
	}
	for _, tc := range buckets {
		t.Run(tc.spec.Bucket, func(t *testing.T) {
			kv, err := EnsureKV(ctx, c.JS, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.TTL() != tc.ttl || st.TTL() <= 0 {
				t.Errorf("TTL %v, want %v", st.TTL(), tc.ttl)
			}
			if st.History() != 1 {
				t.Errorf("history %d, want 1", st.History())
			}
		})
	}
}

// TestCreateStreamKeepsOwnersSettings: the agent (CreateStream, defaults)
// and the bot (EnsureStream, configured) start and restart in every order;
// the stream keeps the settings of whoever created it first: nobody
// rewrites a stream (an operator does, with admin credentials).
func TestCreateStreamKeepsOwnersSettings(t *testing.T) {
	ctx := testContext(t)
	bot := EventsStream(5*time.Hour, time.Minute)
	agent := EventsStream(0, 0)
	for _, order := range [][]string{
		{"agent", "bot", "agent", "agent", "bot", "agent"},
		{"bot", "agent", "bot", "agent"},
		{"agent", "agent", "bot", "bot", "agent"},
	} {
		t.Run("", func(t *testing.T) {
			c := connect(t, Config{Embedded: LocalConfig{StoreDir: t.TempDir(), Name: "owner"}})
			for i, who := range order {
				var err error
				if who == "bot" {
					_, err = EnsureStream(ctx, c.JS, bot)
				} else {
					_, err = CreateStream(ctx, c.JS, agent)
				}
				if err != nil {
					t.Fatalf("%d %s: %v", i, who, err)
				}
				s, err := c.JS.Stream(ctx, EventsStreamName)
				if err != nil {
					t.Fatal(err)
				}
				// The first to create it sets it; nobody changes it after.
				want := agent
				if order[0] == "bot" {
					want = bot
				}
				if cfg := s.CachedInfo().Config; cfg.MaxAge != want.MaxAge || cfg.Duplicates != want.Duplicates {
					t.Errorf("after %v: max age %v, duplicates %v; want %v, %v", order[:i+1], cfg.MaxAge, cfg.Duplicates, want.MaxAge, want.Duplicates)
				}
			}
		})
	}
}

// TestNameSpelling holds every stream and bucket name to the spelling rule
// of names.go (HCPBOT_<THING> streams, hcpbot-<thing> buckets) and pins the
// five bucket names spelt before it: they are persisted, so "fixing" one
// would strand a running installation's data.
func TestNameSpelling(t *testing.T) {
	legacy := map[string]string{
		"LeasesBucket":        "HCPBOT_LEASES",
		"SilencesBucket":      "HCPBOT_SILENCES",
		"ProposalsBucket":     "hcpbot_proposals",
		"SlackMessagesBucket": "hcpbot_slack",
		"SlackReplayBucket":   "hcpbot_slack_replay",
	}
	for name, got := range map[string]string{
		"LeasesBucket": LeasesBucket, "SilencesBucket": SilencesBucket, "ProposalsBucket": ProposalsBucket,
		"SlackMessagesBucket": SlackMessagesBucket, "SlackReplayBucket": SlackReplayBucket,
	} {
		if got != legacy[name] {
			t.Errorf("%s = %q: a persisted name changed (was %q); migrate explicitly or keep it", name, got, legacy[name])
		}
	}
	isLegacy := func(s string) bool {
		for _, v := range legacy {
			if v == s {
				return true
			}
		}
		return false
	}
	stream := regexp.MustCompile(`^HCPBOT_[A-Z]+(_[A-Z]+)*$`)
	for _, s := range []StreamSpec{EventsStream(0, 0), AuditStream(0, 0), ActionsStream()} {
		if !stream.MatchString(s.Name) {
			t.Errorf("stream %q: new streams are named HCPBOT_<THING>", s.Name)
		}
	}
	bucket := regexp.MustCompile(`^hcpbot-[a-z]+(-[a-z]+)*$`)
	for _, b := range []KVSpec{ProposalsKV(0), SilencesKV(time.Hour), LeasesKV(DefaultLeaseTTL), SlackMessagesKV("", 0),
		SlackReplayKV(time.Minute), DigestTicksKV(), DigestStateKV(), ActionResultsKV(), CheckpointsKV(0)} {
		if !bucket.MatchString(b.Bucket) && !isLegacy(b.Bucket) {
			t.Errorf("bucket %q: new buckets are named hcpbot-<thing>", b.Bucket)
		}
	}
}

// EventsSettings on a stream as the server reports it: Drift names only
// what the settings write, Over keeps the stream's values for the rest and
// fits the duplicate window in the max age, as the server requires of an
// update.
func TestEventsSettingsDriftAndOver(t *testing.T) {
	ctx := testContext(t)
	c := connect(t, Config{URLs: []string{startEmbedded(t, EmbeddedConfig{}).ClientURL()}})
	s, err := EnsureStream(ctx, c.JS, EventsStream(2*time.Hour, 90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	have := s.CachedInfo().Config
	for _, tc := range []struct {
		set  EventsSettings
		want []string
	}{
		{EventsSettings{}, nil},
		{EventsSettings{Replicas: 1, MaxAge: 2 * time.Hour, Duplicates: 90 * time.Second}, nil},
		{EventsSettings{MaxAge: time.Hour}, []string{"max age: 2h0m0s → 1h0m0s"}},
		{EventsSettings{Replicas: 3, MaxAge: time.Hour, Duplicates: 2 * time.Minute},
			[]string{"replicas: 1 → 3", "max age: 2h0m0s → 1h0m0s", "duplicate window: 1m30s → 2m0s"}},
	} {
		if got := tc.set.Drift(have); !slices.Equal(got, tc.want) {
			t.Errorf("%+v.Drift = %q, want %q", tc.set, got, tc.want)
		}
	}
	if got, want := (EventsSettings{}).Spec(), EventsStream(0, 0); !reflect.DeepEqual(got, want) {
		t.Errorf("unset settings: spec %+v, want the defaults %+v", got, want)
	}

	update := func(set EventsSettings) jetstream.StreamConfig {
		t.Helper()
		s, err := c.JS.UpdateStream(ctx, set.Over(have).config())
		if err != nil {
			t.Fatalf("update with %+v over the stream: %v", set, err)
		}
		have = s.CachedInfo().Config
		return have
	}
	if got := update(EventsSettings{MaxAge: time.Hour}); got.MaxAge != time.Hour || got.Duplicates != 90*time.Second || got.Replicas != 1 {
		t.Errorf("max age written: max age %v, duplicates %v, replicas %d; want 1h and the stream's 1m30s, 1", got.MaxAge, got.Duplicates, got.Replicas)
	}
	// A window longer than the stream's max age (which these settings
	// leave to the stream) is cut to it: the server refuses more.
	if got := update(EventsSettings{Duplicates: 3 * time.Hour}); got.MaxAge != time.Hour || got.Duplicates != time.Hour {
		t.Errorf("duplicate window written: max age %v, duplicates %v; want 1h, 1h", got.MaxAge, got.Duplicates)
	}
}
