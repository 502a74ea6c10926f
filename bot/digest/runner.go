package digest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/noproxy"
)

// KV buckets. Tick keys only have to outlive the longest restart or clock
// skew between replicas, so they expire; the previous finding sets must
// survive a weekly schedule, so they do not.
const (
	TicksBucket = bus.DigestTicksBucket
	StateBucket = bus.DigestStateBucket
	TickTTL     = bus.DigestTicksTTL
	// DefaultTickLease is how long a taken tick may stay unposted before
	// another replica takes it over.
	DefaultTickLease = 2 * time.Minute
)

// Tick record states.
const (
	tickTaken  = "taken"
	tickPosted = "posted"
)

// tickRecord is the value of a tick key: who took the tick and until when
// the others leave it to them, or that it was posted. A tick key gets at
// most a few writes (the take, takeovers, the posted mark) and expires
// with the bucket's TTL, so the bucket stays bounded.
type tickRecord struct {
	Owner string    `json:"owner"`
	State string    `json:"state"`
	Until time.Time `json:"until,omitzero"`
}

// parseTick reads a tick value. Values of earlier versions (the bare
// replica id) and unreadable ones count as posted: reposting an old tick
// would be the worse error.
func parseTick(v []byte) tickRecord {
	var rec tickRecord
	if err := json.Unmarshal(v, &rec); err != nil || rec.State == "" {
		return tickRecord{Owner: string(v), State: tickPosted}
	}
	return rec
}

// recentActions bounds the audit records read per digest.
const recentActions = 500

// States is the bot's view of its hosted clusters; *bot.Bot implements it.
type States interface {
	ClusterStates() []bot.ClusterState
}

// Gatherer is States spread over several bot groups (bot/fleet.Client):
// the digest gathers every group's clusters within its context and says
// which groups did not answer, one sentence each.
type Gatherer interface {
	States
	GatherStates(ctx context.Context) (states []bot.ClusterState, missing []string)
}

// Exposures lists the NodePort exposures in place: executed expose
// proposals not rolled back; *approval.Flow implements it. A partial list
// comes with an error.
type Exposures interface {
	Exposures(ctx context.Context) ([]approval.Proposal, error)
}

// Silences lists the silences active at now; *silence.Store implements it.
type Silences interface {
	Active(now time.Time) []silence.Silence
}

// Config of a Runner.
type Config struct {
	Digests []configs.Digest
	Bot     States
	Out     notify.Notifier
	// Mode is Compact for Slack, Full for the console.
	Mode Mode
	// Exposures, Silences and Audit are optional; nil leaves their part
	// out of the digest.
	Exposures Exposures
	Silences  Silences
	Audit     audit.Reader
	// Clients are the NO_PROXY client families the clusters' workloads
	// use; the noProxy findings judge by them (nil: noproxy.DefaultClients).
	Clients []noproxy.Client
	// ClientsOf, when set, chooses each cluster's families (per route
	// or global, bot.noProxyClients); Clients is the fallback.
	ClientsOf diagnose.ClientsFunc
	// TickLease is how long a replica that took a tick has to post it
	// before another replica takes the tick over; default
	// DefaultTickLease. It must exceed the time a post takes plus the
	// clock skew between replicas (the deadline is wall-clock time).
	TickLease time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	Log zerolog.Logger
}

// Runner posts the configured digests. It is safe for concurrent use.
type Runner struct {
	cfg   Config
	ticks jetstream.KeyValue
	state jetstream.KeyValue
	// id tells replicas apart in the tick keys' values, for debugging.
	id string
	// mu serialises the read-build-store of one digest's previous set
	// within this replica (ticks of the same digest never overlap across
	// replicas, since each tick has one owner).
	mu sync.Mutex
}

// NewRunner ensures the KV buckets, with bus.WithReplicas copies (default
// 1), and returns a Runner.
func NewRunner(ctx context.Context, js bus.BucketManager, cfg Config, opts ...bus.Option) (*Runner, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TickLease <= 0 {
		cfg.TickLease = DefaultTickLease
	}
	if cfg.Bot == nil || cfg.Out == nil {
		return nil, errors.New("digest: Bot and Out are required")
	}
	ticks, err := bus.EnsureKV(ctx, js, bus.DigestTicksKV(opts...))
	if err != nil {
		return nil, fmt.Errorf("digest: %w", err)
	}
	state, err := bus.EnsureKV(ctx, js, bus.DigestStateKV(opts...))
	if err != nil {
		return nil, fmt.Errorf("digest: %w", err)
	}
	cfg.Log = cfg.Log.With().Str("component", "digest").Logger()
	return &Runner{cfg: cfg, ticks: ticks, state: state, id: strconv.FormatInt(time.Now().UnixNano(), 36)}, nil
}

// Run fires every digest at its ticks until ctx ends. Ticks missed while
// no replica ran are not caught up: a late digest is worth less than the
// next one on time.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, d := range r.cfg.Digests {
		wg.Go(func() { r.schedule(ctx, d) })
	}
	wg.Wait()
	return nil
}

func (r *Runner) schedule(ctx context.Context, d configs.Digest) {
	// A Fire waits while another replica holds the tick, possibly for a
	// whole lease: it runs aside so that the next tick stays on time.
	var wg sync.WaitGroup
	defer wg.Wait()
	next := d.Next(r.cfg.Now())
	for {
		if next.IsZero() {
			r.cfg.Log.Warn().Str("digest", d.Name).Msg("schedule has no next run")
			return
		}
		t := time.NewTimer(max(next.Sub(r.cfg.Now()), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		tick := next
		wg.Go(func() {
			if _, err := r.Fire(ctx, d, tick); err != nil {
				r.cfg.Log.Error().Err(err).Str("digest", d.Name).Time("tick", tick).Msg("digest not posted")
			}
		})
		next = d.Next(next)
	}
}

// Fire posts digest d for a scheduled tick unless another replica (or this
// one before a restart) posts it. It reports whether this call posted.
//
// Delivery is at least once: the replica that takes the tick holds it for
// TickLease; every other replica that fires the tick waits until the tick
// is marked posted or the lease has passed, and then takes the tick over
// (compare-and-set: one of them wins) and posts it. Posting is idempotent
// per tick: the root's Key is derived from the digest name and the tick
// and the replies carry IDs, so a takeover after a partial post updates
// the same Slack message and thread rather than posting a second one.
// Fire returns when the tick is posted or ctx ends.
func (r *Runner) Fire(ctx context.Context, d configs.Digest, tick time.Time) (bool, error) {
	key := d.Name + "." + strconv.FormatInt(tick.Unix(), 10)
	rev, ok := r.take(ctx, key)
	if !ok {
		if rev, ok = r.await(ctx, key); !ok {
			return false, nil
		}
	}
	if err := r.post(ctx, d, key, tick, true); err != nil {
		// The tick stays taken: another replica takes it over once the
		// lease has passed.
		return true, err
	}
	r.markPosted(ctx, key, rev)
	return true, nil
}

// DigestNow posts every configured digest at once, for `/hcp digest now`.
// On-demand digests take their own tick keys, show the trend against the
// last scheduled digest and do not become the baseline of the next one,
// so they never steal a scheduled digest's trend.
func (r *Runner) DigestNow(ctx context.Context) (string, error) {
	if len(r.cfg.Digests) == 0 {
		return "", errors.New("no digest is configured")
	}
	now := r.cfg.Now()
	var posted []string
	var errs []error
	for _, d := range r.cfg.Digests {
		// Only the replica asked answers: no other waits on these keys.
		key := d.Name + ".now." + strconv.FormatInt(now.UnixNano(), 10)
		rev, ok := r.take(ctx, key)
		if !ok {
			continue
		}
		if err := r.post(ctx, d, key, now, false); err != nil {
			errs = append(errs, err)
			continue
		}
		r.markPosted(ctx, key, rev)
		posted = append(posted, fmt.Sprintf("%s to <#%s>", d.Name, d.Channel))
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return "Digest posted: " + strings.Join(posted, ", ") + ".", nil
}

// held is the record of a tick this replica takes now.
func (r *Runner) held() []byte {
	// The lease is wall-clock time, not cfg.Now: it is compared across
	// replicas, while cfg.Now only places the schedule.
	data, _ := json.Marshal(tickRecord{Owner: r.id, State: tickTaken, Until: time.Now().Add(r.cfg.TickLease)})
	return data
}

// take creates the tick key; the first writer wins. An error other than
// "exists" counts as lost too: posting without the lock could post twice.
func (r *Runner) take(ctx context.Context, key string) (uint64, bool) {
	rev, err := r.ticks.Create(ctx, key, r.held())
	switch {
	case err == nil:
		return rev, true
	case errors.Is(err, jetstream.ErrKeyExists):
		r.cfg.Log.Debug().Str("tick", key).Msg("tick taken by another replica")
	default:
		r.cfg.Log.Error().Err(err).Str("tick", key).Msg("could not take the tick; skipped")
	}
	return 0, false
}

// await follows a tick another replica holds until it is posted (false)
// or its lease has passed; then it takes the tick over at the revision it
// saw, and reports the new revision. A lost compare-and-set means another
// replica took it over first: await follows that one's lease.
func (r *Runner) await(ctx context.Context, key string) (uint64, bool) {
	w, err := r.ticks.Watch(ctx, key)
	if err != nil {
		r.cfg.Log.Error().Err(err).Str("tick", key).Msg("could not follow the tick; skipped")
		return 0, false
	}
	defer func() { _ = w.Stop() }()
	lease := time.NewTimer(time.Hour)
	lease.Stop()
	defer lease.Stop()
	var seen jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return 0, false
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return 0, false
			case e == nil: // the current value has been delivered
				continue
			case e.Operation() != jetstream.KeyValuePut:
				return 0, false // purged: nothing left to post
			}
			rec := parseTick(e.Value())
			if rec.State == tickPosted {
				return 0, false
			}
			seen = e
			lease.Reset(max(time.Until(rec.Until), 0))
		case <-lease.C:
			rev, err := r.ticks.Update(ctx, key, r.held(), seen.Revision())
			if err == nil {
				r.cfg.Log.Warn().Str("tick", key).Str("owner", parseTick(seen.Value()).Owner).
					Msg("tick taken but not posted within its lease; taking it over")
				return rev, true
			}
			// Another replica took it over (its record is on the way), or
			// the store failed: look again a lease later.
			r.cfg.Log.Debug().Err(err).Str("tick", key).Msg("tick takeover lost")
			lease.Reset(r.cfg.TickLease)
		}
	}
}

// markPosted records that the tick is posted, so nobody takes it over. A
// failure only risks a repost by a later takeover, which the notifier's
// keys make an update of the same message.
func (r *Runner) markPosted(ctx context.Context, key string, rev uint64) {
	data, _ := json.Marshal(tickRecord{Owner: r.id, State: tickPosted})
	if _, err := r.ticks.Update(ctx, key, data, rev); err != nil {
		r.cfg.Log.Warn().Err(err).Str("tick", key).Msg("could not mark the tick posted (taken over after the lease?)")
	}
}

func (r *Runner) post(ctx context.Context, d configs.Digest, key string, at time.Time, baseline bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, err := r.previous(ctx, d.Name)
	if err != nil {
		return err
	}
	in := Input{Previous: prev, Clients: r.cfg.Clients}
	states := r.cfg.Bot.ClusterStates
	if g, ok := r.cfg.Bot.(Gatherer); ok {
		states = func() []bot.ClusterState {
			s, missing := g.GatherStates(ctx)
			in.Missing = missing
			return s
		}
	}
	for _, s := range states() {
		c := Cluster{Key: s.Key, HostedCluster: s.HostedCluster, Diagnoses: s.Diagnoses, Unwatched: s.Unwatched}
		if r.cfg.ClientsOf != nil {
			c.Clients = r.cfg.ClientsOf(s.Key, s.HostedCluster.Labels)
		}
		if s.Incident != nil {
			c.Incident = s.Incident.Key
			if len(s.Incident.Diagnoses) > 0 {
				c.IncidentTitle = s.Incident.Diagnoses[0].Title
			}
		}
		in.Clusters = append(in.Clusters, c)
	}
	// Exposures and actions are extras: without them the digest is still
	// worth posting.
	if r.cfg.Exposures != nil {
		ps, err := r.cfg.Exposures.Exposures(ctx)
		if err != nil {
			in.ExposuresIncomplete = true
			r.cfg.Log.Warn().Err(err).Int("read", len(ps)).Msg("exposures incomplete in the digest")
		}
		for _, p := range ps {
			in.Exposures = append(in.Exposures, ExposureOf(p))
		}
	}
	if r.cfg.Silences != nil {
		in.Silences = r.cfg.Silences.Active(at)
	}
	if r.cfg.Audit != nil {
		if in.Actions, err = r.cfg.Audit.Recent(ctx, recentActions); err != nil {
			r.cfg.Log.Warn().Err(err).Msg("actions left out of the digest")
		}
	}
	dg := Build(at, in)
	root, replies := Render(dg, d.Name, r.cfg.Mode)
	root.Key, root.Channel, root.Version = "digest-"+strings.ReplaceAll(key, ".", "-"), d.Channel, 1
	if err := r.cfg.Out.Upsert(ctx, root); err != nil {
		return fmt.Errorf("digest %s: queue summary: %w", d.Name, err)
	}
	for _, rp := range replies {
		rp.Key, rp.Channel = root.Key, d.Channel
		if err := r.cfg.Out.Reply(ctx, rp); err != nil {
			return fmt.Errorf("digest %s: queue reply %s: %w", d.Name, rp.ID, err)
		}
	}
	if !baseline || len(in.Missing) > 0 {
		// A digest without some groups' clusters is no baseline: the
		// next one would call all their findings new.
		return nil
	}
	data, err := json.Marshal(dg.Snapshot())
	if err != nil {
		return fmt.Errorf("digest %s: encode snapshot: %w", d.Name, err)
	}
	if _, err := r.state.Put(ctx, "prev."+d.Name, data); err != nil {
		return fmt.Errorf("digest %s: store snapshot: %w", d.Name, err)
	}
	return nil
}

// previous loads the finding set of the digest's last scheduled run.
func (r *Runner) previous(ctx context.Context, name string) (*Snapshot, error) {
	e, err := r.state.Get(ctx, "prev."+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("digest %s: load previous: %w", name, err)
	}
	var s Snapshot
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		// A corrupt baseline costs one trend line, not the digest.
		r.cfg.Log.Warn().Err(err).Str("digest", name).Msg("previous digest unreadable; starting over")
		return nil, nil
	}
	return &s, nil
}
