package main

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/configs"
)

// silenceOptions seals silences with the signing key (bot/silence: a
// silence mutes an incident, so a stolen bot NATS seed must not write
// one). Without a key (no approvals) they stay unsealed records, as
// before sealing: silences keep working on a read-only bot, and the start
// says who can then write one.
func silenceOptions(cfg *configs.Config, signer *approval.Signer, replicas int, log zerolog.Logger) []silence.Option {
	opts := []silence.Option{silence.WithReplicas(replicas), silence.WithLogger(log)}
	if signer == nil {
		log.Warn().Str("bucket", silence.Bucket).Msg("no signing key (no approvals): silences are not sealed, whoever holds the bot's NATS credentials can mute any incident")
		return opts
	}
	return append(opts, silence.WithSigner(signer.ForSilences(), cfg.Approvals.TrustedKeys...))
}

// checkpointEvery is bot.checkpointEvery as bot.Config takes it: 0s in
// the file means at a clean shutdown only (bot.Config's negative), the
// default is already filled in.
func checkpointEvery(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
