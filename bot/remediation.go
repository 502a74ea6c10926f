package bot

import (
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
)

// An incident follows its fix to the end. Once an approved fix ran on its
// cluster, the incident is "fix applied — rolling out": its headline keeps
// the root cause the fix was approved for (the diagnoses of the moment
// show the rollout's symptoms, e.g. nodes still NotReady with no proxy
// cause left, which is no root cause), and its message tracks the rollout
// (diagnose.Rollout). It resolves as any incident does, when its signals
// clear, and the resolved message tells the story: root cause, fix,
// requester and approver, time to fix and to heal. If it has not healed
// within Config.HealDeadline, or a node goes NotReady after the fix while
// no NodePool is rolling out a config change, it says "fix applied, not
// healed" and offers the fix's rollback.
//
// The remediations come from the approval store (RecordRemediation, fed
// by bot/command from the proposals bucket), which every replica reads:
// an incident finds its fix by cluster and time, so the answer does not
// depend on whether the store or the events stream was read first.

// DefaultHealDeadline is how long a fixed incident may take to heal before
// it says "fix applied, not healed".
const DefaultHealDeadline = 30 * time.Minute

// maxRemediations is how many remediations the bot keeps per cluster,
// newest first: enough for a few fixes and rollbacks within one incident.
const maxRemediations = 8

// maxSteps bounds an incident's recorded timeline steps; beyond it the
// oldest step after the first few goes (the start of a story and its end
// matter most).
const maxSteps = 48

// Remediation is an approved change executed on a hosted cluster, as the
// approval store records it.
type Remediation struct {
	// ID is the action id ("fix-…", "hcp-…").
	ID      string
	Cluster diagnose.Key
	// Kind is the action type ("noproxy-patch").
	Kind string
	// Diff shows the change, one entry per line ("+ " added).
	Diff string
	// Cause is the diagnosis the fix was approved for; zero when it was
	// proposed without one.
	Cause Cause
	// RequestedBy and ApprovedBy are Slack user IDs; RequestedBy may name
	// the diagnosis itself (command.DiagnosisRequester).
	RequestedBy, ApprovedBy string
	ProposedAt, ApprovedAt  time.Time
	// Approvals are every approval that counted, in order (ApprovedBy
	// and ApprovedAt are the one that completed the decision).
	Approvals  []Approval
	ExecutedAt time.Time
	// RolledBackBy and RolledBackAt are set once the fix was rolled back.
	RolledBackBy string
	RolledBackAt time.Time
}

// Approval is one person's approval of a fix.
type Approval struct {
	By string
	At time.Time
}

// Cause is the diagnosis a fix was approved for.
type Cause struct {
	Rule, Title, RootCause string
}

// Status is where an incident stands with its fix.
type Status string

// The statuses of an incident with a fix.
const (
	StatusRollingOut Status = "rolling-out" // the fix ran; the cluster is coming back
	StatusNotHealed  Status = "not-healed"  // past HealDeadline, or a new symptom after the fix
	StatusRolledBack Status = "rolled-back" // the fix was rolled back
	// StatusPaused: the fix ran, but the HostedCluster or a NodePool has
	// its reconciliation paused (spec.pausedUntil), so HyperShift rolls
	// nothing out: neither rolling out nor failed, it waits for the pause
	// (Why says which, and the command that lifts it).
	StatusPaused Status = "waiting-for-pause"
)

// Remedy is an incident's fix and how the cluster responds to it.
type Remedy struct {
	Remediation
	Status Status
	// Why says what makes it not healed ("not healed 30m after the fix",
	// "node w-2 went NotReady after the fix").
	Why string
	// Rollout is the cluster's progress when last looked at.
	Rollout diagnose.Rollout
	// Resumed is when the remedy was first seen no longer paused after a
	// pause: the heal deadline counts from it, as nothing rolled out
	// before.
	Resumed time.Time
}

// Step is one entry of an incident's timeline.
type Step struct {
	At   time.Time
	Text string
	// Actor is the Slack user ID of who did it; "" for what the cluster
	// or the bot did.
	Actor string
}

// RecordRemediation records (or updates, by ID) a remediation of the
// approval store. Only executed ones are kept: a proposal still pending,
// rejected or failed changed nothing on the cluster.
func (b *Bot) RecordRemediation(r Remediation) {
	if r.ExecutedAt.IsZero() || r.ID == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.remediations == nil {
		b.remediations = map[diagnose.Key][]Remediation{}
	}
	list := slices.DeleteFunc(b.remediations[r.Cluster], func(o Remediation) bool { return o.ID == r.ID })
	list = append(list, r)
	slices.SortStableFunc(list, func(a, b Remediation) int { return b.ExecutedAt.Compare(a.ExecutedAt) })
	if len(list) > maxRemediations {
		list = list[:maxRemediations]
	}
	b.remediations[r.Cluster] = list
	if inc := b.incidents[r.Cluster]; inc != nil {
		b.checkRemedy(inc, b.cfg.Now())
	}
	b.wake()
}

// remediationOf returns the newest remediation of inc's cluster executed
// while inc was open, up to at.
func (b *Bot) remediationOf(inc *Incident, at time.Time) (Remediation, bool) {
	for _, r := range b.remediations[inc.Cluster] {
		if r.ExecutedAt.After(at) || r.ExecutedAt.Before(inc.Opened) {
			continue
		}
		if !inc.Open() && r.ExecutedAt.After(inc.Resolved) {
			continue
		}
		return r, true
	}
	return Remediation{}, false
}

// checkRemedy brings inc.Remedy up to date at now and records the new
// state for the flush when what it shows changed. It returns when the
// remedy must be looked at again (the heal deadline), zero if never.
func (b *Bot) checkRemedy(inc *Incident, now time.Time) time.Time {
	r, ok := b.remediationOf(inc, now)
	if !ok {
		if inc.Remedy != nil {
			inc.Remedy = nil
			b.record(inc, now)
		}
		return time.Time{}
	}
	rem := &Remedy{Remediation: r, Status: StatusRollingOut}
	wasPaused := false
	if inc.Remedy != nil {
		rem.Rollout, rem.Resumed = inc.Remedy.Rollout, inc.Remedy.Resumed
		wasPaused = inc.Remedy.Status == StatusPaused
	}
	var again time.Time
	if c := b.model.Cluster(inc.Cluster); c != nil && inc.Open() {
		rem.Rollout = c.Rollout(now)
		switch {
		case len(rem.Rollout.Paused) > 0:
			// HyperShift rolls nothing out while paused: what the
			// cluster shows is not the fix's doing.
			rem.Status, rem.Why = StatusPaused, rem.Rollout.Waits()
		case wasPaused:
			rem.Resumed = now
		}
		// A NodePool rolling the change out restarts or replaces its
		// nodes: a node lost then is the rollout, not a new symptom.
		if late := c.NotReadyAfter(r.ExecutedAt); rem.Status != StatusPaused && len(late) > 0 && len(rem.Rollout.Updating) == 0 {
			rem.Status, rem.Why = StatusNotHealed, "node "+strings.Join(late, ", ")+" went NotReady after the fix"
		}
	}
	deadline := r.ExecutedAt.Add(b.cfg.HealDeadline)
	if rem.Resumed.After(r.ExecutedAt) {
		deadline = rem.Resumed.Add(b.cfg.HealDeadline)
	}
	switch {
	case !r.RolledBackAt.IsZero():
		rem.Status, rem.Why = StatusRolledBack, ""
	case rem.Status == StatusNotHealed || !inc.Open():
	case rem.Status == StatusPaused:
		again = pauseEnd(rem.Rollout.Paused)
	case !now.Before(deadline):
		rem.Status, rem.Why = StatusNotHealed, "not healed "+b.cfg.HealDeadline.String()+" after the fix"
	default:
		again = deadline
	}
	if inc.Remedy == nil || remedyShown(*inc.Remedy) != remedyShown(*rem) {
		inc.Remedy = rem
		b.record(inc, now)
	} else {
		inc.Remedy = rem
	}
	return again
}

// pauseEnd is when the earliest timed pause ends, zero when every pause
// lasts until lifted: the remedy is looked at again then.
func pauseEnd(ps []diagnose.PausedObject) time.Time {
	var t time.Time
	for _, p := range ps {
		if !p.Until.IsZero() && (t.IsZero() || p.Until.Before(t)) {
			t = p.Until
		}
	}
	return t
}

// remedyShown is what a rendering shows of a remedy, for the fingerprint.
func remedyShown(r Remedy) string {
	return r.ID + "|" + string(r.Status) + "|" + r.Why + "|" + r.Rollout.String() + "|" + r.RolledBackBy
}

// remedyStage brings every incident's remedy up to date (a fix learned
// from the store, a rollout step, the heal deadline passing) and makes
// the flush look again at the next deadline. It holds nothing.
type remedyStage struct {
	// check is Bot.checkRemedy; nil while no fix is known.
	check func(inc *Incident, now time.Time) (again time.Time)
}

func (remedyStage) Name() string { return "remedy" }

func (s remedyStage) Exec(f *flushRun, due []*Incident) []*Incident {
	if s.check == nil {
		return due
	}
	for _, inc := range due {
		if again := s.check(inc, f.now); !again.IsZero() {
			f.lookAgain(again)
		}
	}
	return due
}

// noteStep records a step of inc's timeline at the event time at, unless
// it says what the last step of the same kind said.
func (inc *Incident) noteStep(at time.Time, kind, text string) {
	for i := len(inc.steps) - 1; i >= 0; i-- {
		if inc.steps[i].kind == kind {
			if inc.steps[i].Text == text {
				return
			}
			break
		}
	}
	if len(inc.steps) >= maxSteps {
		inc.steps = slices.Delete(inc.steps, 4, 5)
	}
	inc.steps = append(inc.steps, step{Step: Step{At: at, Text: text}, kind: kind})
}

func sameRules(rules []string, diags []diagnose.Diagnosis) bool {
	if len(rules) != len(diags) {
		return false
	}
	for i, d := range diags {
		if rules[i] != d.Rule {
			return false
		}
	}
	return true
}

// step is a recorded timeline step with its kind, which noteStep compares.
type step struct {
	Step
	kind string
}

// noteEvaluation records what an event changed in inc's story: the rules
// that fire (when the set changes) and, once a fix ran, the rollout.
func (b *Bot) noteEvaluation(inc *Incident, c *diagnose.Cluster, diags []diagnose.Diagnosis, observed time.Time) {
	if inc == nil || !inc.Open() {
		return
	}
	// Per event, and events come by the thousand (make bench, B1): only
	// a change of the rules that fire costs an allocation.
	if !sameRules(inc.rules, diags) {
		inc.rules = inc.rules[:0]
		for _, d := range diags {
			inc.rules = append(inc.rules, d.Rule)
		}
		inc.noteStep(observed, "rules", "diagnosed: "+strings.Join(inc.rules, ", "))
	}
	if c == nil || len(b.remediations) == 0 {
		return
	}
	if _, ok := b.remediationOf(inc, observed); ok {
		inc.noteStep(observed, "rollout", "rollout: "+c.Rollout(observed).String())
	}
}
