package bot

import (
	"slices"
	"sort"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/storm"
	"github.com/hcpbot/hcpbot/event"
)

// The read views of the correlator: copies of what it holds, for readers
// outside the event loop (the /hcp answers, digests, benchmarks). Each
// takes the lock once and returns copies, so the event loop may go on.

// Incidents returns every incident, open ones first, newest first.
func (b *Bot) Incidents() []Incident {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleAll(nil)
	now := b.cfg.Now()
	out := make([]Incident, 0, len(b.incidents))
	for _, inc := range b.incidents {
		if len(b.remediations) > 0 {
			b.checkRemedy(inc, now) // a follower's flush does not
		}
		out = append(out, *inc.copy())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Open() != out[j].Open() {
			return out[i].Open()
		}
		return out[i].Opened.After(out[j].Opened)
	})
	return out
}

// Diagnose returns the current diagnoses of a hosted cluster.
func (b *Bot) Diagnose(k diagnose.Key) ([]diagnose.Diagnosis, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return nil, false
	}
	return diagnose.Diagnose(c, b.cfg.Now()), true
}

// Explain says what every rule made of a hosted cluster: fired,
// explained by an earlier rule, or not seen.
func (b *Bot) Explain(k diagnose.Key) ([]diagnose.Verdict, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return nil, false
	}
	return diagnose.Explain(c, b.cfg.Now()), true
}

// Unwatched says why the agent does not watch a hosted cluster; ok is
// false while it does (or the cluster is unknown).
func (b *Bot) Unwatched(k diagnose.Key) (reason string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return "", false
	}
	reason, _, ok = c.Unwatched()
	return reason, ok
}

// Clusters returns the keys of every hosted cluster the bot knows.
func (b *Bot) Clusters() []diagnose.Key {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []diagnose.Key
	for _, k := range b.model.Keys() {
		if !k.Management() {
			out = append(out, k)
		}
	}
	return out
}

// ClusterState is a copy of what the bot knows of one hosted cluster, for
// readers outside the event loop (digests, noproxy checks).
type ClusterState struct {
	Key diagnose.Key
	// HostedCluster is the newest HostedClusterState; Known is false until
	// one was seen. Proxy URLs are redacted by package event.
	HostedCluster event.HostedClusterState
	Known         bool
	Diagnoses     []diagnose.Diagnosis
	// Incident is the open incident of the cluster, nil when none.
	Incident *Incident
	// Unwatched says why the agent does not watch the cluster (its admin
	// kubeconfig is missing, invalid or refused); "" while it does.
	Unwatched string
}

// ClusterStates returns every live hosted cluster the bot knows, sorted by
// key. The states are copies: slices are cloned so the event loop may go on.
func (b *Bot) ClusterStates() []ClusterState {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleAll(nil)
	var out []ClusterState
	for _, k := range b.model.Keys() {
		c := b.model.Cluster(k)
		if k.Management() || c == nil || c.Gone() {
			continue
		}
		s := ClusterState{Key: k, Diagnoses: diagnose.Diagnose(c, b.cfg.Now())}
		if hc, ok := c.HostedCluster(); ok {
			s.HostedCluster, s.Known = cloneHC(hc), true
		}
		if inc := b.incidents[k]; inc != nil && inc.Open() {
			s.Incident = inc.copy()
		}
		if why, _, ok := c.Unwatched(); ok {
			s.Unwatched = why
		}
		out = append(out, s)
	}
	return out
}

// HostedCluster returns a copy of a hosted cluster's newest state.
func (b *Bot) HostedCluster(k diagnose.Key) (event.HostedClusterState, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return event.HostedClusterState{}, false
	}
	hc, ok := c.HostedCluster()
	return cloneHC(hc), ok
}

// cloneHC copies the slices the model shares with its readers.
func cloneHC(hc event.HostedClusterState) event.HostedClusterState {
	hc.ClusterNetwork = slices.Clone(hc.ClusterNetwork)
	hc.ServiceNetwork = slices.Clone(hc.ServiceNetwork)
	hc.MachineNetwork = slices.Clone(hc.MachineNetwork)
	hc.Conditions = slices.Clone(hc.Conditions)
	hc.Proxy.ReadinessEndpoints = slices.Clone(hc.Proxy.ReadinessEndpoints)
	if hc.ControlPlaneEndpoint != nil {
		ep := *hc.ControlPlaneEndpoint
		hc.ControlPlaneEndpoint = &ep
	}
	if hc.APIServer != nil {
		ep := *hc.APIServer
		hc.APIServer = &ep
	}
	return hc
}

// Nodes returns the node population the bot knows of a hosted cluster
// (from the agent's node summary when one arrived).
func (b *Bot) Nodes(k diagnose.Key) (diagnose.NodeCount, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return diagnose.NodeCount{}, false
	}
	return c.Nodes(), true
}

// copy returns a snapshot of the incident for readers outside the lock.
func (inc *Incident) copy() *Incident {
	cp := *inc
	cp.n = notifyState{}
	cp.steps = slices.Clone(inc.steps)
	cp.rules = slices.Clone(inc.rules)
	if inc.Remedy != nil {
		r := *inc.Remedy
		r.Rollout.Updating = slices.Clone(r.Rollout.Updating)
		r.Rollout.NotReady = slices.Clone(r.Rollout.NotReady)
		r.Rollout.Crashlooping = slices.Clone(r.Rollout.Crashlooping)
		cp.Remedy = &r
	}
	if inc.Silence != nil {
		s := *inc.Silence
		cp.Silence = &s
	}
	return &cp
}

// Storms returns a snapshot of every storm, open ones first.
func (b *Bot) Storms() []StormState {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]StormState, 0, len(b.storms))
	for _, s := range b.storms {
		st := StormState{Key: s.Key, Cause: s.Cause, Channel: s.Channel, Opened: s.Opened, Resolved: s.Resolved}
		for _, m := range s.Members {
			st.Members = append(st.Members, m.Key)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(x, y StormState) int {
		if x.Resolved.IsZero() != y.Resolved.IsZero() {
			if x.Resolved.IsZero() {
				return -1
			}
			return 1
		}
		return y.Opened.Compare(x.Opened)
	})
	return out
}

// StormState is a copy of a storm for readers outside the event loop.
type StormState struct {
	Key      string
	Cause    storm.Cause
	Channel  string
	Opened   time.Time
	Resolved time.Time
	Members  []string // incident keys
}
