package bot

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
)

// Timeline is the incident's story in order: the first symptom and each
// change of what was diagnosed and of the rollout (from the events, by
// their own time), the fix's proposal, every approval and its execution
// (from the approval store), the rollback, and the resolution. Both
// sources are durable, so a restarted bot tells the same story.
func (inc *Incident) Timeline() []Step {
	out := append(inc.EventSteps(), inc.RemedySteps()...)
	slices.SortStableFunc(out, func(a, b Step) int { return a.At.Compare(b.At) })
	return out
}

// EventSteps is the part of the timeline told by the events: the first
// symptom, each change of diagnosis and rollout, and the resolution.
func (inc *Incident) EventSteps() []Step {
	out := make([]Step, 0, len(inc.steps)+2)
	if len(inc.steps) == 0 || !inc.steps[0].At.Equal(inc.Opened) {
		out = append(out, Step{At: inc.Opened, Text: "first symptom"})
	}
	for i, s := range inc.steps {
		st := s.Step
		if i == 0 && st.At.Equal(inc.Opened) {
			st.Text = "first symptom — " + st.Text
		}
		out = append(out, st)
	}
	if !inc.Open() {
		text := "resolved: every signal clear"
		if inc.Deleted {
			text = "resolved: the HostedCluster was deleted"
		}
		out = append(out, Step{At: inc.Resolved, Text: text})
	}
	return out
}

// RemedySteps is the part of the timeline told by the approval store: the
// fix that ran, proposed, approved by each, executed, rolled back.
func (inc *Incident) RemedySteps() []Step {
	r := inc.Remedy
	if r == nil {
		return nil
	}
	var out []Step
	if !r.ProposedAt.IsZero() {
		out = append(out, Step{At: r.ProposedAt, Text: fmt.Sprintf("fix `%s` proposed (%s)", r.ID, r.Kind), Actor: r.RequestedBy})
	}
	approvals := r.Approvals
	if len(approvals) == 0 && !r.ApprovedAt.IsZero() {
		approvals = []Approval{{By: r.ApprovedBy, At: r.ApprovedAt}}
	}
	for i, a := range approvals {
		text := fmt.Sprintf("fix `%s` approved", r.ID)
		if len(approvals) > 1 {
			text = fmt.Sprintf("fix `%s` approved (%d of %d)", r.ID, i+1, len(approvals))
		}
		out = append(out, Step{At: a.At, Text: text, Actor: a.By})
	}
	out = append(out, Step{At: r.ExecutedAt, Text: fmt.Sprintf("fix `%s` executed by the agent", r.ID)})
	if !r.RolledBackAt.IsZero() {
		out = append(out, Step{At: r.RolledBackAt, Text: fmt.Sprintf("fix `%s` rolled back", r.ID), Actor: r.RolledBackBy})
	}
	return out
}

// TimelineText renders a timeline as a postmortem draft: Markdown, times
// in UTC, who did what.
func TimelineText(inc *Incident, steps []Step) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*Timeline of `%s`* (%s, times UTC)\n", inc.Key, blockkit.EscapeText(inc.Cluster.String()))
	for _, s := range steps {
		fmt.Fprintf(&b, "• `%s` %s", s.At.UTC().Format("2006-01-02 15:04:05"), blockkit.EscapeText(s.Text))
		if s.Actor != "" {
			b.WriteString(" — " + who(s.Actor))
		}
		b.WriteString("\n")
	}
	if r := inc.Remedy; r != nil && !inc.Open() {
		fmt.Fprintf(&b, "Time to fix %s · to heal %s · open %s\n", r.ExecutedAt.Sub(inc.Opened).Round(time.Second),
			inc.Resolved.Sub(r.ExecutedAt).Round(time.Second), inc.Resolved.Sub(inc.Opened).Round(time.Second))
	}
	return strings.TrimRight(b.String(), "\n")
}

// Timeline returns the timeline of the incident with key (any replica
// can answer: every one replays the same events and reads the same
// approval store).
func (b *Bot) Timeline(key string) (Incident, []Step, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleAll(nil)
	for _, inc := range b.incidents {
		if inc.Key == key {
			b.checkRemedy(inc, b.cfg.Now())
			return *inc.copy(), inc.Timeline(), true
		}
	}
	for _, inc := range b.pending {
		if inc.Key == key {
			return *inc.copy(), inc.Timeline(), true
		}
	}
	return Incident{}, nil, false
}
