package bot

import "github.com/hcpbot/hcpbot/bot/diagnose"

// Nodes returns the node population the bot knows of a hosted cluster
// (from the agent's node summary when one arrived).
func (b *Bot) Nodes(k diagnose.Key) (diagnose.NodeCount, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return diagnose.NodeCount{}, false
	}
	return c.Nodes(), true
}
