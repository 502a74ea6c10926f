// Package storm finds the cause that many incidents share, so that the
// correlator can post one storm message instead of hundreds of incident
// messages.
//
// It is pure: the correlator (package bot) describes each candidate
// incident as a Member with the causes it could share (CausesOf), and Find
// returns the groups of at least Threshold members that share one cause and
// opened within one Window of each other. Times are the incidents' own
// (event) times, never the wall clock, so the same events give the same
// storms whenever they are replayed — after a restart too. Only how long
// an incident is held back while a storm may form (Brewing) reads when the
// correlator saw it.
package storm

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/redact"
)

// Kind is a kind of shared cause, from the most specific to the least.
type Kind int

// Kinds of shared causes. A lower Kind wins: "the same proxy change" says
// more than "the same proxy", which says more than "the same management
// cluster".
const (
	ProxyChange Kind = iota
	ProxyEndpoint
	Management
)

func (k Kind) String() string {
	switch k {
	case ProxyChange:
		return "proxy-change"
	case ProxyEndpoint:
		return "proxy-endpoint"
	case Management:
		return "management-cluster"
	}
	return fmt.Sprintf("kind-%d", int(k))
}

// Cause is something several incidents may have in common.
type Cause struct {
	Kind Kind
	// Value compares causes of one Kind; it holds no credentials.
	Value string
	// Text says it for people, as the end of "All of them …".
	Text string
}

// Member is one open incident that may belong to a storm.
type Member struct {
	Key    string    // the incident key
	Opened time.Time // when the incident's first signal was observed
	Causes []Cause
	// Seen is when the correlator learned of the incident (its own
	// clock). Only Brewing reads it, to tell whether a storm is still
	// growing; which storm an incident belongs to never depends on it.
	Seen time.Time
}

// Group is a storm: members sharing Cause, sorted by Opened then Key.
type Group struct {
	Cause   Cause
	Members []Member
}

// Key is the storm's stable id: the same members' cause and first opening
// give the same key after a restart, so notify finds the same message.
func (g Group) Key() string {
	first := g.Members[0].Opened.UTC().Format(time.RFC3339Nano)
	sum := sha256.Sum256([]byte(g.Cause.Kind.String() + "\x00" + g.Cause.Value + "\x00" + first))
	return "storm-" + hex.EncodeToString(sum[:6])
}

// Find groups members into storms: for each cause kind, most specific
// first, every run of at least threshold members that share a cause value
// and opened within window of the run's first member. Members go to the
// first storm that takes them; rest keeps the others in their input order.
func Find(members []Member, threshold int, window time.Duration) (storms []Group, rest []Member) {
	if threshold < 2 {
		threshold = 2
	}
	taken := make(map[string]bool)
	for _, kind := range []Kind{ProxyChange, ProxyEndpoint, Management} {
		byValue := map[string][]Member{}
		causes := map[string]Cause{}
		for _, m := range members {
			if taken[m.Key] {
				continue
			}
			for _, c := range m.Causes {
				if c.Kind == kind {
					byValue[c.Value] = append(byValue[c.Value], m)
					causes[c.Value] = c
				}
			}
		}
		values := make([]string, 0, len(byValue))
		for v := range byValue {
			values = append(values, v)
		}
		slices.Sort(values)
		for _, v := range values {
			ms := byValue[v]
			slices.SortFunc(ms, compareMembers)
			for _, run := range runs(ms, threshold, window) {
				for _, m := range run {
					taken[m.Key] = true
				}
				storms = append(storms, Group{Cause: causes[v], Members: run})
			}
		}
	}
	for _, m := range members {
		if !taken[m.Key] {
			rest = append(rest, m)
		}
	}
	return storms, rest
}

// runs returns the windows of sorted ms holding at least threshold members,
// each starting at the earliest member not yet taken.
func runs(ms []Member, threshold int, window time.Duration) [][]Member {
	var out [][]Member
	for i := 0; i < len(ms); {
		j := i
		for j < len(ms) && ms[j].Opened.Sub(ms[i].Opened) <= window {
			j++
		}
		if j-i >= threshold {
			out = append(out, slices.Clone(ms[i:j]))
			i = j
			continue
		}
		i++
	}
	return out
}

func compareMembers(a, b Member) int {
	return cmp.Or(a.Opened.Compare(b.Opened), cmp.Compare(a.Key, b.Key))
}

// Joins reports whether an incident with causes may join a storm of cause
// c whose newest member opened at last: same cause, within window.
func Joins(c Cause, last time.Time, causes []Cause, opened time.Time, window time.Duration) bool {
	if opened.Sub(last) > window {
		return false
	}
	return slices.ContainsFunc(causes, c.same)
}

// Brewing returns until when an incident with causes, opened at opened,
// is held back because a storm may be forming around it; zero when none
// may. For each of its causes, the members sharing it that opened within
// window of it (either side, the incident among them) are the storm in the
// making, and one is brewing while both hold:
//
//   - It can still form: some run of them that holds the incident, opened
//     within window of its first member (as Find's runs are) and has at
//     least two members, would reach threshold before that window closes
//     if the members still missing arrived at the pace the run's members
//     opened at. A few incidents trickling in can never make a storm, and
//     counting them (as a fixed share of the threshold did) held unrelated
//     incidents for the whole window.
//   - It is still growing: its newest member was seen less than quiet ago
//     (the correlator passes its group wait: as an incident's group wait
//     gathers its signals, a storm's gathers its members). Agents report a
//     real storm over seconds, member after member; a burst of unrelated
//     failures stops, and is let go quiet after its last member.
//
// The result is the latest such newest Seen plus quiet; the caller caps
// the hold at the window. quiet ≤ 0 holds nothing (group wait 0 posts at
// once).
func Brewing(causes []Cause, opened time.Time, members []Member, threshold int, window, quiet time.Duration) time.Time {
	var until time.Time
	if quiet <= 0 {
		return until
	}
	threshold = max(threshold, 2)
	for _, c := range causes {
		var ms []Member
		for _, m := range members {
			if d := m.Opened.Sub(opened); d > window || -d > window {
				continue
			}
			if slices.ContainsFunc(m.Causes, c.same) {
				ms = append(ms, m)
			}
		}
		if len(ms) < 2 || !canForm(ms, opened, threshold, window) {
			continue
		}
		newest := slices.MaxFunc(ms, func(a, b Member) int { return a.Seen.Compare(b.Seen) })
		if at := newest.Seen.Add(quiet); at.After(until) {
			until = at
		}
	}
	return until
}

// canForm reports whether a run of ms holding the incident opened at
// opened can reach threshold within window of its first member at the
// pace its members opened at: k members over span arrive one every
// span/(k-1), so the threshold-k missing ones need span*(threshold-k)/(k-1)
// of what is left of the window. It sorts ms.
func canForm(ms []Member, opened time.Time, threshold int, window time.Duration) bool {
	slices.SortFunc(ms, compareMembers)
	for i, m := range ms {
		first := m.Opened
		if first.After(opened) {
			break
		}
		if opened.Sub(first) > window {
			continue
		}
		j := i
		for j < len(ms) && ms[j].Opened.Sub(first) <= window {
			j++
		}
		k := j - i
		if k >= threshold {
			return true
		}
		if k < 2 {
			continue
		}
		last := ms[j-1].Opened
		span, left := last.Sub(first), first.Add(window).Sub(last)
		if span*time.Duration(threshold-k) <= left*time.Duration(k-1) {
			return true
		}
	}
	return false
}

// same reports whether x is the same cause as c.
func (c Cause) same(x Cause) bool { return x.Kind == c.Kind && x.Value == c.Value }

// CausesOf lists the causes an incident of cluster k could share with
// others: the proxy change that triggered its top diagnosis, the proxy it
// sends its traffic through, and its management cluster.
func CausesOf(k diagnose.Key, hc event.HostedClusterState, known bool, diags []diagnose.Diagnosis) []Cause {
	var out []Cause
	for _, d := range diags {
		if c, ok := changeCause(d.Trigger); ok {
			out = append(out, c)
			break
		}
	}
	if known {
		if ep := proxyEndpoint(hc.Proxy.HTTPSProxy); ep != "" {
			out = append(out, Cause{Kind: ProxyEndpoint, Value: ep, Text: fmt.Sprintf("send their traffic through the proxy `%s`", ep)})
		}
	}
	out = append(out, Cause{Kind: Management, Value: k.Source, Text: fmt.Sprintf("run on management cluster `%s`", k.Source)})
	return out
}

// changeCause describes the edit that triggered a diagnosis so that the
// same edit rolled out to many clusters compares equal: what it removed
// from noProxy, or the proxy it set where there was none. Entries it added
// are left out, since a rollout often adds each cluster's own CIDRs.
func changeCause(t *diagnose.ProxyChangeRef) (Cause, bool) {
	if t == nil {
		return Cause{}, false
	}
	kind := strings.SplitN(t.Target, "/", 2)[0]
	switch {
	case len(t.Removed) > 0:
		removed := slices.Sorted(slices.Values(t.Removed))
		return Cause{Kind: ProxyChange, Value: kind + "|removed|" + strings.Join(removed, ","),
			Text: fmt.Sprintf("had the same %s edit: %s removed from noProxy", kind, quoteAll(removed))}, true
	case t.OldHTTPSProxy == "" && t.NewHTTPSProxy != "":
		ep := proxyEndpoint(t.NewHTTPSProxy)
		return Cause{Kind: ProxyChange, Value: kind + "|set|" + ep,
			Text: fmt.Sprintf("had the same %s edit: httpsProxy `%s` set without the API server bypass", kind, ep)}, true
	}
	return Cause{}, false
}

// proxyEndpoint is the scheme://host:port of a proxy URL, never its
// credentials.
func proxyEndpoint(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return redact.RedactText(raw)
	}
	return u.Scheme + "://" + u.Host
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, e := range s {
		q[i] = "`" + e + "`"
	}
	return strings.Join(q, ", ")
}
