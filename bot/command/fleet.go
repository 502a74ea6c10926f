package command

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

// Fleet is a Correlator whose picture is spread over several bot groups,
// each holding the clusters of its partition (package bot/fleet). The
// handler reads a fleet through one View per command or button press:
// every read of the view ends by the request's deadline, a group that
// did not answer is asked no more within it, and the reply says which
// groups did not answer — never a silent partial answer. A Correlator
// that is no Fleet (the local *bot.Bot) is read as before.
type Fleet interface {
	Correlator
	View(ctx context.Context) FleetView
}

// FleetView is a fleet's picture as one command reads it.
type FleetView interface {
	Correlator
	// Status is the `status` line of every cluster ref matches (nil:
	// all), each made by the group that holds the cluster (StatusOf), in
	// the order of Clusters; gathered in one round, not one per cluster.
	Status(ref *chatops.ClusterRef) []StatusLine
	// EventSteps is the part of incident key's timeline told by the
	// events (bot.Incident.EventSteps), from the group that holds it: an
	// Incident read from another group carries only its exported fields.
	EventSteps(key string) ([]bot.Step, bool)
	// Missing lists the groups that did not answer a read of this view,
	// one sentence each; nil when every group asked answered.
	Missing() []string
}

// StatusLine is one cluster's line of `status`.
type StatusLine struct {
	Key   diagnose.Key
	State string // "healthy", "critical: <title>", "not watched: <why>", ...
	// Rank orders the listing: not watched, critical, warning, other,
	// healthy (status.go).
	Rank int
}

// StatusOf is the `status` line of every cluster of b that ref matches
// (nil: all), in b's order.
func StatusOf(b Correlator, ref *chatops.ClusterRef) []StatusLine {
	var out []StatusLine
	for _, k := range b.Clusters() {
		if ref != nil && (k.Cluster != event.ClusterRef{Namespace: ref.Namespace, Name: ref.Name} || (ref.Mgmt != "" && ref.Mgmt != k.Source)) {
			continue
		}
		diags, _ := b.Diagnose(k)
		state := "healthy"
		why, unwatched := b.Unwatched(k)
		rank := rankOf(unwatched, diags)
		if unwatched {
			// Why the bot is blind there comes first, in full.
			state = "not watched: " + why
			diags = slices.DeleteFunc(diags, func(d diagnose.Diagnosis) bool { return d.Rule == diagnose.RuleHostedNotWatched })
			if len(diags) > 0 {
				state += "; also " + string(diags[0].Severity) + ": " + diags[0].Title
			}
		} else if len(diags) > 0 {
			state = string(diags[0].Severity) + ": " + diags[0].Title
		}
		out = append(out, StatusLine{Key: k, State: state, Rank: rank})
	}
	return out
}

// statusLines reads the status lines from the view when the correlator
// is one (a round per group), else from the correlator itself.
func (c *Handler) statusLines(ref *chatops.ClusterRef) []StatusLine {
	if v, ok := c.Bot.(FleetView); ok {
		return v.Status(ref)
	}
	return StatusOf(c.Bot, ref)
}

// eventSteps is inc's timeline as the events tell it.
func (c *Handler) eventSteps(inc bot.Incident) []bot.Step {
	if v, ok := c.Bot.(FleetView); ok {
		if steps, ok := v.EventSteps(inc.Key); ok {
			return steps
		}
	}
	return inc.EventSteps()
}

// inView runs one command or press on a fleet's view, when the
// correlator is a fleet, and says in the reply which groups did not
// answer.
func (c *Handler) inView(ctx context.Context, run func(*Handler) chatops.Reply) chatops.Reply {
	f, ok := c.Bot.(Fleet)
	if !ok {
		return run(c)
	}
	v := f.View(ctx)
	h := *c
	h.Bot = v
	return withMissing(run(&h), v.Missing())
}

// withMissing adds to r what is missing from it: a reply that lists or
// finds clusters from part of the fleet says so.
func withMissing(r chatops.Reply, missing []string) chatops.Reply {
	if len(missing) == 0 {
		return r
	}
	note := "_" + esc(strings.Join(missing, "\n")) + "_"
	r.Text = strings.TrimRight(r.Text, "\n") + "\n" + note
	if len(r.Blocks) > 0 {
		r.Blocks = append(r.Blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, note, false, false), nil, nil))
	}
	return r
}

// MissingGroup is the sentence of a group that did not answer.
func MissingGroup(index, count int, why string) string {
	return fmt.Sprintf("group %d of %d did not answer (%s): its clusters, incidents and storms are not in this answer", index, count, why)
}
