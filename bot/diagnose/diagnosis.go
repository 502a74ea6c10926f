package diagnose

import (
	"cmp"
	"slices"
	"time"
)

// Severity ranks a diagnosis.
type Severity string

// Severities, most severe first.
const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// Level is how sure a diagnosis is of its root cause.
type Level string

// Confidence levels.
const (
	ConfidenceHigh   Level = "high"
	ConfidenceMedium Level = "medium"
	ConfidenceLow    Level = "low"
)

// Confidence is a Level with the reason for it, for the reader who has to
// decide whether to act on the fix.
type Confidence struct {
	Level Level
	Why   string
}

// Evidence is one observed fact behind a diagnosis. At is the fact's own
// time (a transition, a termination, a probe's first failure, an edit),
// never the time of the diagnosis.
type Evidence struct {
	At     time.Time
	Kind   string // "proxy-spec", "proxy-change", "node", "nodepool", "crashloop", "apiserver-proxy", "virt-launcher", "reachability", "condition", "lint"
	Object string // "node/<name>", "pod/<ns>/<name>", "hostedcluster/<ns>/<name>", ...
	Text   string
}

// Fix is a configuration change the bot proposes.
type Fix struct {
	Kind   string // "noproxy"
	Target string // "HostedCluster/<ns>/<name>" or "Proxy/cluster"
	// Before and After are the whole noProxy value; Add lists the entries
	// After appends, in order.
	Before, After string
	Add           []string
	// Diff shows the change one entry per line ("  " kept, "+ " added,
	// "- " dropped).
	Diff string
	// Waits says why applying it will not roll out yet, with the command
	// that lifts the hold: "The rollout waits for the pause: HostedCluster
	// … paused …. Lift it with oc patch …". Empty when nothing holds it.
	Waits string
}

// ProxyChangeRef names the proxy edit that preceded a diagnosis.
type ProxyChangeRef struct {
	At                           time.Time // when the agent saw the edit
	Target                       string    // "HostedCluster/<ns>/<name>" or "Proxy/cluster"
	OldHTTPSProxy, NewHTTPSProxy string    // redacted
	OldNoProxy, NewNoProxy       string
	Added, Removed               []string // noProxy entries
}

// Diagnosis explains a problem of one Cluster. It is deterministic for a
// given state: evidence is sorted, strings are built from facts only.
type Diagnosis struct {
	Rule      string // the Rule's ID
	Severity  Severity
	Title     string // one line
	RootCause string // a few sentences: the reasoning, for the thread
	// Summary is the root cause for a glance: at most two short
	// sentences naming what is wrong and the fix. Empty: the first two
	// sentences of RootCause stand for it (Diagnosis.Short).
	Summary    string
	Confidence Confidence
	Evidence   []Evidence // sorted by time, then kind, object, text
	Fix        *Fix       // nil when no fix is offered
	NextSteps  []string
	// Symptoms are the keys of the symptoms this diagnosis explains
	// ("node/<name>", "pod/<ns>/<name>", "nodepool/<ns>/<name>",
	// "proxy/<ns>/<name>", "api/<ns>/<name>", or "proxy/cluster" for the
	// management cluster's Proxy), sorted; later rules leave them out.
	Symptoms []string
	Trigger  *ProxyChangeRef // the proxy change that preceded the symptoms, if any
	// Nodes is how many of the cluster's nodes the diagnosis covers as
	// NotReady or not joining, of its real total; nil when it covers none.
	Nodes *NodeImpact
	// Began is when the cluster's own record says the problem began: the
	// earliest of its evidence's own times (a condition's
	// lastTransitionTime, which HyperShift moves only when the status
	// changes; a node's Ready transition; a probe's first failure). Zero
	// when the evidence has none; Since falls back to the incident's
	// opening then.
	Began time.Time
	// Paused lists the cluster's objects whose reconciliation is paused
	// at the time of the diagnosis: nothing rolls out until they resume.
	Paused []PausedObject
}

// Short returns the root cause for a glance: Summary, else the first two
// sentences of RootCause.
func (d Diagnosis) Short() string {
	if d.Summary != "" {
		return d.Summary
	}
	s, n := d.RootCause, 0
	for i := 0; i < len(s)-1; i++ {
		if s[i] == '.' && s[i+1] == ' ' {
			if n++; n == 2 {
				return s[:i+1]
			}
		}
	}
	return s
}

// NodeImpact is "Affected of Total nodes": Total from the agent's node
// summary, so storms add up real cluster sizes.
type NodeImpact struct {
	Affected, Total int
	// Text says it for a glance: "3 of 10 nodes are NotReady", "… not
	// joining", or both.
	Text string
}

// Explained is the set of symptoms earlier rules of a run have explained.
type Explained struct {
	by map[string]string
	// brief asks for the first phase only (RuleSet.Brief): a rule may
	// then return its verdict without building texts.
	brief bool
}

// Has reports whether an earlier diagnosis explains the symptom.
func (x Explained) Has(symptom string) bool {
	_, ok := x.by[symptom]
	return ok
}

// By returns the ID of the rule that explained the symptom, or "".
func (x Explained) By(symptom string) string { return x.by[symptom] }

// RuleFunc looks at a Cluster and returns a diagnosis when it applies. It
// must leave out the symptoms in explained, must not modify c, and must
// give the same result for the same state.
type RuleFunc func(c *Cluster, now time.Time, explained Explained) (Diagnosis, bool)

// Rule is a named RuleFunc. The ID is stable: the correlator and users key
// on it.
type Rule struct {
	ID   string
	Eval RuleFunc
}

// RuleSet is an ordered list of rules: earlier rules take precedence and
// explain symptoms for the later ones.
type RuleSet []Rule

// Diagnose runs the rules of rs on c in order. Each diagnosis gets its
// rule's ID, sorted evidence and sorted symptoms; its symptoms are then
// explained for the rules after it.
func (rs RuleSet) Diagnose(c *Cluster, now time.Time) []Diagnosis { return rs.run(c, now, false) }

// Brief is the first phase of Diagnose: which rules fire and on which
// symptoms, in the same order and with the same Rule and Symptoms as
// Diagnose gives for the same state and now; the other fields may be
// left empty. The correlator runs it on every event and builds the full
// diagnoses (titles, evidence text, fixes) only when it renders: the
// notifier sends at most one rendering per group interval, while events
// come by the thousand (make bench, B1).
func (rs RuleSet) Brief(c *Cluster, now time.Time) []Diagnosis { return rs.run(c, now, true) }

func (rs RuleSet) run(c *Cluster, now time.Time, brief bool) []Diagnosis {
	out, _ := rs.runExplained(c, now, brief)
	return out
}

// runExplained is run, returning which rule explained which symptom too.
func (rs RuleSet) runExplained(c *Cluster, now time.Time, brief bool) ([]Diagnosis, Explained) {
	var out []Diagnosis
	x := Explained{by: make(map[string]string, 16), brief: brief}
	var paused []PausedObject // read once per run, when a rule fires
	var invalid []string
	for _, r := range rs {
		d, ok := r.Eval(c, now, x)
		if !ok {
			continue
		}
		d.Rule = r.ID
		if !brief {
			if paused == nil {
				paused, invalid = c.Paused(now), c.invalidPauses(now)
				if paused == nil {
					paused = []PausedObject{}
				}
			}
			if len(paused) > 0 {
				d.Paused = slices.Clone(paused)
			}
			c.notePause(&d, paused, invalid)
			d.Began = began(d)
		}
		slices.SortFunc(d.Evidence, compareEvidence)
		slices.Sort(d.Symptoms)
		d.Symptoms = slices.Compact(d.Symptoms)
		for _, s := range d.Symptoms {
			if !x.Has(s) {
				x.by[s] = r.ID
			}
		}
		out = append(out, d)
	}
	return out, x
}

// Outcome is what became of one rule in a run of Diagnose.
type Outcome string

// The outcomes of a rule.
const (
	// OutcomeFired: the rule returned a diagnosis.
	OutcomeFired Outcome = "fired"
	// OutcomeExplained: the rule sees a problem, but an earlier rule's
	// diagnosis explains all of it (the inhibition).
	OutcomeExplained Outcome = "explained"
	// OutcomeNotSeen: what the rule looks for is not there.
	OutcomeNotSeen Outcome = "not-seen"
)

// Verdict is what one rule made of a cluster, for "/hcp diagnose" to
// explain rules that did not fire.
type Verdict struct {
	Rule    string
	Outcome Outcome
	// Title is the diagnosis's title when the rule fired.
	Title string
	// ExplainedBy is the rule whose diagnosis explains what this rule
	// would have reported (the earliest, when several did).
	ExplainedBy string
	// LooksFor is RuleInfo(Rule): what the rule needs to fire.
	LooksFor string
}

// Explain runs the rules of rs on c like Diagnose and returns one Verdict
// per rule, in order: fired (with its title), explained by an earlier
// rule, or not seen. A rule that did not fire is run again on its own,
// with nothing explained: if it fires then, the rules that explained its
// symptoms in the run inhibited it.
func (rs RuleSet) Explain(c *Cluster, now time.Time) []Verdict {
	ds, x := rs.runExplained(c, now, false)
	fired := make(map[string]string, len(ds))
	for _, d := range ds {
		fired[d.Rule] = d.Title
	}
	order := make(map[string]int, len(rs))
	for i, r := range rs {
		if _, dup := order[r.ID]; !dup {
			order[r.ID] = i
		}
	}
	out := make([]Verdict, 0, len(rs))
	for _, r := range rs {
		v := Verdict{Rule: r.ID, Outcome: OutcomeNotSeen, LooksFor: RuleInfo(r.ID)}
		if title, ok := fired[r.ID]; ok {
			v.Outcome, v.Title = OutcomeFired, title
		} else if d, ok := r.Eval(c, now, Explained{by: map[string]string{}}); ok {
			for _, s := range d.Symptoms {
				if by := x.By(s); by != "" && (v.ExplainedBy == "" || order[by] < order[v.ExplainedBy]) {
					v.ExplainedBy = by
				}
			}
			if v.ExplainedBy != "" {
				v.Outcome = OutcomeExplained
			}
		}
		out = append(out, v)
	}
	return out
}

// Explain runs DefaultRules' Explain on c.
func Explain(c *Cluster, now time.Time) []Verdict { return defaultRules.Explain(c, now) }

// Diagnose runs DefaultRules on c.
func Diagnose(c *Cluster, now time.Time) []Diagnosis { return defaultRules.Diagnose(c, now) }

// Brief runs the first phase of DefaultRules on c (RuleSet.Brief).
func Brief(c *Cluster, now time.Time) []Diagnosis { return defaultRules.Brief(c, now) }

// defaultRules is DefaultRules, built once: Diagnose runs on every event.
var defaultRules = DefaultRules()

func compareEvidence(a, b Evidence) int {
	return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Object, b.Object), cmp.Compare(a.Text, b.Text))
}
