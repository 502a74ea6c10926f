package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/silence"
)

// silence mutes a known cluster or incident.
func (c *Handler) silence(ctx context.Context, cmd chatops.Silence, user string) chatops.Reply {
	if c.Silences == nil {
		return unavailable(cmd)
	}
	sil := silence.Silence{Reason: cmd.Reason, CreatedBy: user, ExpiresAt: c.now().Add(cmd.Duration)}
	var what string
	if cmd.Cluster != nil {
		k, reply, ok := c.resolve(*cmd.Cluster)
		if !ok {
			return reply
		}
		sil.Cluster, what = k.String(), "cluster "+k.String()
	} else {
		known := false
		for _, inc := range c.Bot.Incidents() {
			// A storm's key silences the storm's message.
			if inc.Key == cmd.IncidentID || (inc.Storm != "" && inc.Storm == cmd.IncidentID) {
				known = true
				break
			}
		}
		if !known {
			return chatops.Reply{Text: fmt.Sprintf("Unknown incident `%s`; `/hcp incidents` lists them.", esc(cmd.IncidentID))}
		}
		sil.Incident, what = cmd.IncidentID, "incident "+cmd.IncidentID
	}
	if maxD := c.Silences.MaxDuration(); cmd.Duration > maxD {
		return chatops.Reply{Text: fmt.Sprintf("A silence lasts at most %s on this bot.\nUsage: `%s`", formatSpan(maxD), esc(chatops.Usage("silence")))}
	}
	sil, err := c.Silences.Add(ctx, sil)
	warning := ""
	switch {
	case errors.Is(err, silence.ErrAudit):
		warning = "\n_Warning: the audit record of this silence could not be written._"
	case errors.Is(err, silence.ErrInvalid):
		return chatops.Reply{Text: "Cannot silence that: " + errText(err)}
	case err != nil:
		return chatops.Reply{Text: "Could not store the silence: " + errText(err)}
	}
	text := fmt.Sprintf("%s silenced %s for %s, until %s (`%s`).", blockkit.Mention(user), esc(what),
		formatSpan(sil.ExpiresAt.Sub(sil.CreatedAt)), sil.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC"), sil.ID)
	if sil.Reason != "" {
		text += " Reason: " + esc(sil.Reason)
	}
	return chatops.Reply{Text: text + warning, InChannel: true}
}

// formatSpan renders a duration the way people type it: 2h, 90m, 3d.
func formatSpan(d time.Duration) string {
	d = d.Round(time.Minute)
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dm", d/time.Minute)
}
