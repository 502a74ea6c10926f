package digest

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

// Cluster is the input about one hosted cluster.
type Cluster struct {
	Key           diagnose.Key
	HostedCluster event.HostedClusterState
	Diagnoses     []diagnose.Diagnosis
	// Incident is the key of the open incident, "" when none; IncidentTitle
	// its first diagnosis.
	Incident      string
	IncidentTitle string
	// Unwatched says why the agent does not watch the cluster (its admin
	// kubeconfig is missing, invalid or refused); "" while it does.
	Unwatched string
	// Clients are the client families this cluster's workloads use; nil
	// means Input.Clients.
	Clients []noproxy.Client
}

// Exposure is a hosted Service the bot published on NodePorts (an
// executed expose action not rolled back).
type Exposure struct {
	Key      diagnose.Key
	ActionID string
	Service  string // the hosted Service, namespace/name
	// Ports are the published ports (Service port → node port).
	Ports []actions.ExposedPort
	// Created are the Services the action created.
	Created     []actions.ObjectRef
	RequestedBy string // Slack user ids
	ApprovedBy  string
	ExecutedAt  time.Time
}

// ExposureOf maps an executed expose proposal onto an Exposure.
func ExposureOf(p approval.Proposal) Exposure {
	e := Exposure{
		Key:      diagnose.Key{Source: p.Source, Cluster: event.ClusterRef{Namespace: p.Change.Cluster.Namespace, Name: p.Change.Cluster.Name}},
		ActionID: p.ID, RequestedBy: p.RequestedBy, ApprovedBy: p.DecidedBy, ExecutedAt: p.Executed(),
	}
	if x := p.Change.Expose; x != nil {
		e.Service = x.Namespace + "/" + x.Service
	}
	if p.Result != nil {
		e.Ports, e.Created = p.Result.Ports, p.Result.Created
	}
	return e
}

// Input is what Build needs; every part may be empty.
type Input struct {
	Clusters  []Cluster
	Exposures []Exposure
	// ExposuresIncomplete says the exposure list is partial (it could not
	// be read, or not all of it).
	ExposuresIncomplete bool
	// Silences active at the digest's time; Build places each on the
	// cluster it names or whose open incident it names.
	Silences []silence.Silence
	// Actions are audit records; Build keeps those after Previous.At.
	Actions []audit.Record
	// Missing says, one sentence each, which bot groups did not answer
	// (bot/fleet): their clusters are not in this digest.
	Missing []string
	// Previous is the finding set of the previous digest, nil for the
	// first one.
	Previous *Snapshot
	// Clients are the client families the noProxy findings judge by; nil
	// means noproxy.DefaultClients (Go, curl, Python requests, urllib).
	Clients []noproxy.Client
}

// Snapshot is the part of a digest the next one compares with.
type Snapshot struct {
	At       time.Time `json:"at"`
	Findings []string  `json:"findings"` // FindingID, sorted
	// Since is when each finding was first seen, by FindingID (absent
	// from snapshots written before it was kept).
	Since map[string]time.Time `json:"since,omitempty"`
}

// Finding is a lint finding of one cluster.
type Finding struct {
	noproxy.Finding
	New   bool      // not in the previous digest
	Class Class     // whether it needs action (Classify)
	Since time.Time // first seen in a digest (this one's time when New or First)
}

// ClusterReport is the digest of one hosted cluster.
type ClusterReport struct {
	Key      diagnose.Key
	Proxy    bool // a proxy is configured
	Findings []Finding
	// Fixed are findings of the previous digest that are gone (code and
	// entry joined by a space).
	Fixed          []string
	PoolsUnhealthy []string // nodepool/<ns>/<name> named by diagnoses
	Incident       string
	IncidentTitle  string
	Unwatched      string // why the agent does not watch it; "" while it does
	Silences       []silence.Silence
	Exposures      []Exposure
	Actions        []audit.Record
}

// Compliant reports whether the cluster has no finding that needs
// action; informational findings never make it non-compliant.
func (r ClusterReport) Compliant() bool { return r.NeedingAction() == 0 }

// NeedingAction counts the cluster's findings that need action.
func (r ClusterReport) NeedingAction() int {
	n := 0
	for _, f := range r.Findings {
		if f.Class == NeedsAction {
			n++
		}
	}
	return n
}

// Source groups the clusters of one management cluster.
type Source struct {
	Name     string
	Clusters []ClusterReport
}

// Digest is one built digest.
type Digest struct {
	At      time.Time
	Sources []Source
	// Counts of findings by severity over all clusters; Action of those
	// that need action, by severity; Informational of the others.
	Counts        map[noproxy.Severity]int
	Action        map[noproxy.Severity]int
	Informational int
	// New and Fixed count the trend against the previous digest; First
	// is true when there was none.
	New, Fixed int
	First      bool
	Since      time.Time // the previous digest, zero when First
	// Actions executed since the previous digest that name no cluster
	// the bot knows.
	OtherActions []audit.Record
	// Exposures and silences that name no cluster the bot knows (an
	// exposure left on a cluster the bot no longer sees; a silenced storm
	// or incident not open now).
	OtherExposures      []Exposure
	OtherSilences       []silence.Silence
	ExposuresIncomplete bool
	// Missing are the bot groups whose clusters are not in the digest
	// (Input.Missing).
	Missing []string
}

// Counts of one management cluster, for the summary.
func (s Source) counts() (incidents, silences, exposures, unwatched int) {
	for _, c := range s.Clusters {
		if c.Incident != "" {
			incidents++
		}
		if c.Unwatched != "" {
			unwatched++
		}
		silences += len(c.Silences)
		exposures += len(c.Exposures)
	}
	return incidents, silences, exposures, unwatched
}

// NonCompliant returns the clusters with a finding that needs action.
func (d Digest) NonCompliant() []ClusterReport {
	var out []ClusterReport
	for _, s := range d.Sources {
		for _, c := range s.Clusters {
			if !c.Compliant() {
				out = append(out, c)
			}
		}
	}
	return out
}

// Snapshot returns what the next digest compares with.
func (d Digest) Snapshot() Snapshot {
	s := Snapshot{At: d.At, Findings: []string{}, Since: map[string]time.Time{}}
	for _, src := range d.Sources {
		for _, c := range src.Clusters {
			for _, f := range c.Findings {
				id := FindingID(c.Key, f.Finding)
				s.Findings = append(s.Findings, id)
				s.Since[id] = f.Since
			}
		}
	}
	slices.Sort(s.Findings)
	return s
}

// FindingID identifies a finding across digests: cluster, code and entry.
// Entries are redacted by noproxy, so IDs hold no credentials.
func FindingID(k diagnose.Key, f noproxy.Finding) string {
	return k.Source + "|" + k.Cluster.String() + "|" + f.Code + "|" + f.Entry
}

// actionKinds are the audit kinds that mean something was done.
var actionKinds = map[audit.Kind]bool{audit.KindExecuted: true, audit.KindFailed: true, audit.KindRolledBack: true}

// Build makes the digest at now. It is pure.
func Build(now time.Time, in Input) Digest {
	d := Digest{At: now, Counts: map[noproxy.Severity]int{}, Action: map[noproxy.Severity]int{}, First: in.Previous == nil,
		ExposuresIncomplete: in.ExposuresIncomplete, Missing: in.Missing}
	prev := map[string]bool{}
	if in.Previous != nil {
		d.Since = in.Previous.At
		for _, id := range in.Previous.Findings {
			prev[id] = true
		}
	}
	seen := map[string]bool{}
	reports := map[diagnose.Key]*ClusterReport{}
	var order []diagnose.Key
	for _, c := range in.Clusters {
		r := &ClusterReport{Key: c.Key, Proxy: c.HostedCluster.Proxy.HTTPProxy != "" || c.HostedCluster.Proxy.HTTPSProxy != "",
			Incident: c.Incident, IncidentTitle: c.IncidentTitle, Unwatched: c.Unwatched}
		cp := ClusterProxy(c.HostedCluster)
		cp.Clients = in.Clients
		if len(c.Clients) > 0 {
			cp.Clients = c.Clients
		}
		clients := cp.Clients
		if len(clients) == 0 {
			clients = noproxy.DefaultClients()
		}
		// LintClients adds the entries some of the families ignore (a CIDR
		// protects nothing for urllib, wget or node); Warnings what will
		// break before it does (an expiring proxy CA, ignition or
		// konnectivity sent through the proxy).
		findings := append(noproxy.Lint(cp), noproxy.LintClients(cp, clients)...)
		for _, f := range append(findings, diagnose.Warnings(c.HostedCluster, now)...) {
			id := FindingID(c.Key, f)
			seen[id] = true
			isNew := !d.First && !prev[id]
			if isNew {
				d.New++
			}
			d.Counts[f.Severity]++
			class := Classify(f)
			if class == NeedsAction {
				d.Action[f.Severity]++
			} else {
				d.Informational++
			}
			r.Findings = append(r.Findings, Finding{Finding: f, New: isNew, Class: class, Since: sinceOf(id, now, in.Previous, prev[id])})
		}
		for _, diag := range c.Diagnoses {
			for _, s := range diag.Symptoms {
				if strings.HasPrefix(s, "nodepool/") && !slices.Contains(r.PoolsUnhealthy, s) {
					r.PoolsUnhealthy = append(r.PoolsUnhealthy, s)
				}
			}
		}
		slices.Sort(r.PoolsUnhealthy)
		reports[c.Key] = r
		order = append(order, c.Key)
	}
	// Fixed: previous findings of clusters still known that are gone now;
	// a deleted cluster's findings are not "fixed".
	for id := range prev {
		if seen[id] {
			continue
		}
		parts := strings.SplitN(id, "|", 4)
		if len(parts) != 4 {
			continue
		}
		for _, k := range order {
			if k.Source == parts[0] && k.Cluster.String() == parts[1] {
				reports[k].Fixed = append(reports[k].Fixed, strings.TrimSpace(parts[2]+" "+parts[3]))
				d.Fixed++
			}
		}
	}
	for _, e := range in.Exposures {
		// An expose proposed without a source names the cluster only.
		if k, ok := place(order, e.Key.Source, e.Key.Cluster.String()); ok {
			reports[k].Exposures = append(reports[k].Exposures, e)
		} else {
			d.OtherExposures = append(d.OtherExposures, e)
		}
	}
	for _, sil := range in.Silences {
		if !sil.Active(now) {
			continue
		}
		placed := false
		for _, k := range order {
			r := reports[k]
			if (sil.Cluster != "" && sil.Cluster == k.String()) || (sil.Incident != "" && sil.Incident == r.Incident) {
				r.Silences = append(r.Silences, sil)
				placed = true
				break
			}
		}
		if !placed {
			d.OtherSilences = append(d.OtherSilences, sil)
		}
	}
	for _, a := range in.Actions {
		if !actionKinds[a.Kind] || (!d.First && !a.Time.After(d.Since)) || a.Time.After(now) {
			continue
		}
		placed := false
		for _, k := range order {
			if a.Cluster == k.Cluster.String() && (a.Source == "" || a.Source == k.Source) {
				reports[k].Actions = append(reports[k].Actions, a)
				placed = true
				break
			}
		}
		if !placed {
			d.OtherActions = append(d.OtherActions, a)
		}
	}
	bySource := map[string]*Source{}
	for _, k := range order {
		r := reports[k]
		slices.Sort(r.Fixed)
		slices.SortFunc(r.Actions, byTime)
		slices.SortFunc(r.Exposures, byExecution)
		slices.SortFunc(r.Silences, byExpiry)
		s := bySource[k.Source]
		if s == nil {
			s = &Source{Name: k.Source}
			bySource[k.Source] = s
		}
		s.Clusters = append(s.Clusters, *r)
	}
	for _, s := range bySource {
		slices.SortFunc(s.Clusters, func(a, b ClusterReport) int { return cmp.Compare(a.Key.Cluster.String(), b.Key.Cluster.String()) })
		d.Sources = append(d.Sources, *s)
	}
	slices.SortFunc(d.Sources, func(a, b Source) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(d.OtherActions, byTime)
	slices.SortFunc(d.OtherExposures, byExecution)
	slices.SortFunc(d.OtherSilences, byExpiry)
	return d
}

// place finds the known cluster of source (any when "") and cluster.
func place(order []diagnose.Key, source, cluster string) (diagnose.Key, bool) {
	for _, k := range order {
		if cluster == k.Cluster.String() && (source == "" || source == k.Source) {
			return k, true
		}
	}
	return diagnose.Key{}, false
}

func byTime(a, b audit.Record) int { return a.Time.Compare(b.Time) }

func byExecution(a, b Exposure) int {
	return cmp.Or(a.ExecutedAt.Compare(b.ExecutedAt), cmp.Compare(a.ActionID, b.ActionID))
}

func byExpiry(a, b silence.Silence) int {
	return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.ID, b.ID))
}

// ClusterProxy maps a HostedCluster's state onto the lint input.
func ClusterProxy(hc event.HostedClusterState) noproxy.ClusterProxy {
	cp := noproxy.ClusterProxy{
		HTTPProxy: hc.Proxy.HTTPProxy, HTTPSProxy: hc.Proxy.HTTPSProxy, NoProxy: hc.Proxy.NoProxy, TrustedCA: hc.Proxy.TrustedCA,
		ServiceCIDRs: hc.ServiceNetwork, ClusterCIDRs: hc.ClusterNetwork, MachineCIDRs: hc.MachineNetwork,
		Platform: hc.Platform, Release: hc.Version,
	}
	if ep := hc.ControlPlaneEndpoint; ep != nil {
		cp.APIServerHost, cp.APIServerPort = ep.Host, ep.Port
	}
	return cp
}
