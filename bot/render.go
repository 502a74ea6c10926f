package bot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
)

// What every rendering shares: the incident's message (render_incident.go),
// its thread (render_thread.go) and the storm's (render_storm.go).

// severityIcon marks a severity in headlines and thread lines.
var severityIcon = map[diagnose.Severity]string{
	diagnose.SeverityCritical: "🔴", diagnose.SeverityWarning: "🟠", diagnose.SeverityInfo: "🔵",
}

// who names a user as Slack shows them; a requester that is not a person
// (approval.SystemRequesterPrefix: the diagnosis that proposed a fix) by
// its name, as there is no one to mention.
func who(user string) string {
	switch {
	case user == "":
		return "unknown"
	case strings.HasPrefix(user, approval.SystemRequesterPrefix):
		return blockkit.EscapeText(user)
	}
	return blockkit.Mention(user)
}

// digest identifies what a rendering shows. Rendered at a fixed time (the
// opening), durations stay out of it: a restarted bot that re-renders an
// incident nobody changed leaves its message alone (notify.Message.Digest).
func digest(text string, blocks []slack.Block) string {
	h := sha256.New()
	h.Write([]byte(text))
	if b, err := json.Marshal(blocks); err == nil {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// evidenceLine is one evidence item as shown in messages and threads.
func evidenceLine(e diagnose.Evidence) string {
	return fmt.Sprintf("• `%s` %s — %s", e.At.UTC().Format("15:04:05"), blockkit.EscapeText(e.Object), blockkit.EscapeText(e.Text))
}
