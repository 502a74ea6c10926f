package digest

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/noproxy"
)

// Class says what a finding asks of people.
type Class int

const (
	// NeedsAction: something is broken, will break, or is unsafe, and a
	// change to the cluster's configuration fixes it. It makes its
	// cluster non-compliant.
	NeedsAction Class = iota
	// Informational: worth knowing, nothing to change now. It never makes
	// a cluster non-compliant.
	Informational
)

func (c Class) String() string {
	if c == NeedsAction {
		return "needs action"
	}
	return "informational"
}

// classRule classifies the findings of one code.
type classRule int

const (
	always     classRule = iota // needs action whatever its severity
	bySeverity                  // critical and warning need action, info does not
	never                       // informational whatever its severity
)

// classes classifies every finding code the digest shows, each for a
// reason. A code missing here (a new lint) is classified by severity.
var classes = map[string]classRule{
	// The noProxy coverage checks: their severity already says who fills
	// the gap. Critical or warning, the cluster's own clients miss it (the
	// seed 000 tunnel: API traffic through the proxy); info, HyperShift or
	// Konvoy add the entry to the rendered list by themselves (or, for
	// missing-kubernetes, the kube-apiserver-proxy already goes direct),
	// so only clients configured from the spec value miss it.
	noproxy.CodeMissingKubernetes:           bySeverity,
	noproxy.CodeMissingServiceCIDR:          bySeverity,
	noproxy.CodeMissingClusterCIDR:          bySeverity,
	noproxy.CodeMissingMachineCIDR:          bySeverity,
	noproxy.CodeMissingLocalhost:            bySeverity,
	noproxy.CodeMissingSvc:                  bySeverity,
	noproxy.CodeMissingClusterLocal:         bySeverity,
	noproxy.CodeMissingKubernetesDefaultSvc: bySeverity,
	// The proxy URLs: unusable (invalid, a scheme the platform cannot
	// use), unverifiable (https without a CA bundle), or leaking the
	// proxy's password into every node's and pod's environment.
	noproxy.CodeInvalidProxyURL:            always,
	noproxy.CodeProxySchemeNotHTTP:         always,
	noproxy.CodeHTTPSProxyWithoutTrustedCA: always,
	noproxy.CodeCredentialsInProxyURL:      always,
	// "*" turns the proxy off for Go and Node clients: egress bypasses
	// the proxy the cluster is meant to go through.
	noproxy.CodeWildcardDisablesProxy: always,
	// An entry no client matches exempts nothing: what it was written
	// for goes through the proxy. An ambiguous one means different things
	// to different clients (for some, nothing, e.g. a trailing dot for Go);
	// both are fixed by rewriting one entry.
	noproxy.CodeUnmatchableEntry: always,
	noproxy.CodeAmbiguousEntry:   always,
	// A repeated entry costs nothing.
	noproxy.CodeDuplicateEntry: never,
	// An entry some client families cannot express (a CIDR for urllib,
	// wget or node): the families that can are protected, the platform's
	// own components (Go) among them, and no noProxy makes e.g. urllib
	// honour a CIDR; the fix only narrows the gap by listing addresses.
	// Flagging it made every cluster with a CIDR in noProxy, i.e. every
	// correctly configured one, "not compliant".
	noproxy.CodeIgnoredByClients: never,
	// A suggested list, the fix of the finding above.
	noproxy.CodeListForAllClients: never,
	// The proactive warnings: a proxy CA that is missing, unusable,
	// expired or expiring (nobody renews a corporate CA for you), and
	// ignition or konnectivity sent through the proxy (new nodes cannot
	// join, logs and exec fail). Each breaks the cluster, now or soon.
	diagnose.WarnTrustedCAMissing:     always,
	diagnose.WarnTrustedCAUnusable:    always,
	diagnose.WarnTrustedCAExpired:     always,
	diagnose.WarnTrustedCAExpiring:    always,
	diagnose.WarnIgnitionThroughProxy: always,
	diagnose.WarnKonnectivityThrough:  always,
}

// The rest of a digest is not findings and never changes compliance:
//   - an open incident is listed with its cluster; it has its own
//     message and thread, where it is acted on;
//   - a NodePort exposure in place was approved by two people and is
//     listed so that it is rolled back once it is not needed;
//   - actions taken and findings fixed are history;
//   - silences say who keeps what quiet until when.
//
// Two of them need action all the same and are listed under it: a
// cluster the agent cannot watch (the bot is blind inside it) and an
// exposure on no cluster the bot knows (nobody watches that NodePort).

// Classify says whether f needs action.
func Classify(f noproxy.Finding) Class {
	rule, ok := classes[f.Code]
	if !ok {
		rule = bySeverity
	}
	switch {
	case rule == always, rule == bySeverity && f.Severity != noproxy.SeverityInfo:
		return NeedsAction
	}
	return Informational
}

// Item is a finding that needs action, with its cluster.
type Item struct {
	Key      diagnose.Key
	Finding  Finding
	Incident string // the cluster's open incident, "" when none
}

// NeedsAction returns the findings that need action, ranked: most severe
// first (critical, then warning); then those of clusters with an open
// incident (the cluster is hurting now); then the oldest (first seen in
// an earlier digest: left longest); then by cluster, code and entry.
func (d Digest) NeedsAction() []Item {
	var out []Item
	for _, s := range d.Sources {
		for _, c := range s.Clusters {
			for _, f := range c.Findings {
				if f.Class == NeedsAction {
					out = append(out, Item{Key: c.Key, Finding: f, Incident: c.Incident})
				}
			}
		}
	}
	sortItems(out)
	return out
}

func sortItems(items []Item) {
	rank := func(s noproxy.Severity) int {
		switch s {
		case noproxy.SeverityCritical:
			return 0
		case noproxy.SeverityWarning:
			return 1
		}
		return 2
	}
	hurting := func(it Item) int {
		if it.Incident != "" {
			return 0
		}
		return 1
	}
	slices.SortFunc(items, func(a, b Item) int {
		return cmp.Or(
			cmp.Compare(rank(a.Finding.Severity), rank(b.Finding.Severity)),
			cmp.Compare(hurting(a), hurting(b)),
			a.Finding.Since.Compare(b.Finding.Since),
			strings.Compare(a.Key.String(), b.Key.String()),
			strings.Compare(a.Finding.Code, b.Finding.Code),
			strings.Compare(a.Finding.Entry, b.Finding.Entry))
	})
}

// sinceOf is when a finding was first seen: its first digest's time as
// the previous snapshot recorded it, else the previous digest's time if
// it was in it (a snapshot written before first-seen times were kept),
// else now.
func sinceOf(id string, now time.Time, prev *Snapshot, inPrev bool) time.Time {
	if prev == nil || !inPrev {
		return now
	}
	if t, ok := prev.Since[id]; ok && !t.IsZero() {
		return t
	}
	return prev.At
}
