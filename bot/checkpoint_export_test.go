package bot

import "github.com/hcpbot/hcpbot/bot/diagnose"

// ModelCheckpoint copies the model as a checkpoint holds it, for tests
// comparing two replicas' models field by field (ModelCheckpoint.Diff).
func (b *Bot) ModelCheckpoint() *diagnose.ModelCheckpoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.model.Checkpoint()
}

// Applied is the stream sequence of the newest event applied.
func (b *Bot) Applied() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied
}
