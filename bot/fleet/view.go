package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

// view is one command's read of the fleet: each question is asked once
// (answers are kept for the view's life), and a group that did not
// answer is not asked again within it.
type view struct {
	c   *Client
	ctx context.Context

	mu     sync.Mutex
	failed map[int]string            // group → why it has no answer
	cache  map[string]map[int]answer // question → group → answer
}

func (v *view) all() []int {
	out := make([]int, v.c.cfg.Set.Count)
	for i := range out {
		out[i] = i
	}
	return out
}

// ask asks groups r (a fresh nonce each time it goes out) and returns
// the answers of those that answered, by group.
func (v *view) ask(r request, groups []int) map[int]answer {
	q, _ := json.Marshal(r) // the question, before its nonce
	v.mu.Lock()
	defer v.mu.Unlock()
	got := v.cache[string(q)]
	if got == nil {
		got = map[int]answer{}
		v.cache[string(q)] = got
	}
	var local bool
	var remote []int
	for _, g := range groups {
		_, have := got[g]
		_, failed := v.failed[g]
		switch {
		case have || failed:
		case g == v.c.cfg.Self:
			local = true
		default:
			remote = append(remote, g)
		}
	}
	if local || len(remote) > 0 {
		answers, missing := v.c.fanOut(v.ctx, r, local, remote)
		for g, a := range answers {
			got[g] = a
		}
		for g, why := range missing {
			v.failed[g] = why
		}
	}
	out := map[int]answer{}
	for _, g := range groups {
		if a, ok := got[g]; ok {
			out[g] = a
		}
	}
	return out
}

// inOrder lists answers by group.
func inOrder(answers map[int]answer) []answer {
	out := make([]answer, 0, len(answers))
	for _, g := range slices.Sorted(maps.Keys(answers)) {
		out = append(out, answers[g])
	}
	return out
}

func compareKeys(a, b diagnose.Key) int {
	return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Cluster.Namespace, b.Cluster.Namespace), cmp.Compare(a.Cluster.Name, b.Cluster.Name))
}

func (v *view) Clusters() []diagnose.Key {
	var out []diagnose.Key
	for _, a := range inOrder(v.ask(request{Op: opClusters}, v.all())) {
		out = append(out, a.Clusters...)
	}
	// As one bot lists them (diagnose.Model.Keys); a cluster two groups
	// know (during a repartition) once.
	slices.SortStableFunc(out, compareKeys)
	return slices.Compact(out)
}

// cluster is the answer about k of the group that holds it.
func (v *view) cluster(k diagnose.Key) answer {
	g := v.c.cfg.Set.Of(k.Source)
	return v.ask(request{Op: opCluster, Key: &k}, []int{g})[g]
}

func (v *view) Diagnose(k diagnose.Key) ([]diagnose.Diagnosis, bool) {
	a := v.cluster(k)
	return a.Diagnoses, a.Known
}

func (v *view) Explain(k diagnose.Key) ([]diagnose.Verdict, bool) {
	a := v.cluster(k)
	return a.Verdicts, a.Explained
}

func (v *view) Unwatched(k diagnose.Key) (string, bool) {
	a := v.cluster(k)
	return a.Unwatched, a.NotWatched
}

func (v *view) HostedCluster(k diagnose.Key) (event.HostedClusterState, bool) {
	a := v.cluster(k)
	return a.HC, a.HasHC
}

// Incidents is every group's incidents as one bot orders its own: open
// ones first, newest first (ties by key, so the order is stable).
func (v *view) Incidents() []bot.Incident {
	var out []bot.Incident
	for _, a := range inOrder(v.ask(request{Op: opIncidents}, v.all())) {
		out = append(out, a.Incidents...)
	}
	slices.SortStableFunc(out, func(x, y bot.Incident) int {
		if x.Open() != y.Open() {
			if x.Open() {
				return -1
			}
			return 1
		}
		return cmp.Or(y.Opened.Compare(x.Opened), cmp.Compare(x.Key, y.Key))
	})
	return out
}

// Storms is every group's storms as one bot orders its own: open ones
// first, newest first. A cause that struck clusters of two groups is two
// storms, one per group.
func (v *view) Storms() []bot.StormState {
	var out []bot.StormState
	for _, a := range inOrder(v.ask(request{Op: opIncidents}, v.all())) {
		out = append(out, a.Storms...)
	}
	slices.SortStableFunc(out, func(x, y bot.StormState) int {
		if x.Resolved.IsZero() != y.Resolved.IsZero() {
			if x.Resolved.IsZero() {
				return -1
			}
			return 1
		}
		return cmp.Or(y.Opened.Compare(x.Opened), cmp.Compare(x.Key, y.Key))
	})
	return out
}

// timeline is the answer of the first group that knows incident key.
func (v *view) timeline(key string) answer {
	for _, a := range inOrder(v.ask(request{Op: opTimeline, Incident: key}, v.all())) {
		if a.Known {
			return a
		}
	}
	return answer{}
}

func (v *view) Timeline(key string) (bot.Incident, []bot.Step, bool) {
	a := v.timeline(key)
	return a.Incident, a.Steps, a.Known
}

func (v *view) EventSteps(key string) ([]bot.Step, bool) {
	a := v.timeline(key)
	return a.EventSteps, a.Known
}

func (v *view) Status(ref *chatops.ClusterRef) []command.StatusLine {
	var out []command.StatusLine
	for _, a := range inOrder(v.ask(request{Op: opStatus, Ref: ref}, v.all())) {
		out = append(out, a.Status...)
	}
	slices.SortStableFunc(out, func(x, y command.StatusLine) int { return compareKeys(x.Key, y.Key) })
	return slices.CompactFunc(out, func(x, y command.StatusLine) bool { return x.Key == y.Key })
}

func (v *view) Missing() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, g := range slices.Sorted(maps.Keys(v.failed)) {
		out = append(out, command.MissingGroup(g, v.c.cfg.Set.Count, v.failed[g]))
	}
	return out
}
