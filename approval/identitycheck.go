package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
)

// CheckConfig configures ServeChecks.
type CheckConfig struct {
	Source     string
	Keys       []string // the bot's trusted keys
	Identities identity.Map
	// Access runs the SubjectAccessReviews of ch as id.
	Access func(ctx context.Context, id identity.Identity, ch actions.Change) (missing []string, err error)
	// Preflight reads, writing nothing, whether an exposure's node ports
	// are free (actions.Executor.Preflight); nil, the agent says it
	// cannot tell and the bot proposes with a note.
	Preflight func(ctx context.Context, ch actions.Change) (*actions.Preflight, error)
	Log       zerolog.Logger
	Now       func() time.Time
}

// ServeChecks answers the bots' identity checks for cfg.Source until ctx
// ends: the approver's identity by the agent's own map, then whether it
// may make the change. Only a check sealed by a trusted key, fresh, for
// this agent, is answered. It answers the preflights of exposures on the
// same subject (a seal of their own, each nonce once per replica:
// admitPreflight), a few at a time beside the checks (readPreflight).
// It answers only on a bot's inbox.
func ServeChecks(ctx context.Context, nc *nats.Conn, cfg CheckConfig) error {
	subject, err := event.IdentityCheckSubject(cfg.Source)
	if err != nil {
		return fmt.Errorf("approval: identity checks: %w", err)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	// Every replica answers (a check reads, it changes nothing); one of
	// them each time.
	var seen nonces
	// Preflights read both clusters for up to preflightWork, and any
	// channel member can have the bot ask one (/hcp expose): they are read
	// beside the subscription, a few at a time, so that the approvals'
	// identity checks never wait behind them; past that, one is answered
	// busy at once (the bot proposes with its note).
	slots := make(chan struct{}, maxPreflights)
	var reading sync.WaitGroup
	respond := func(m *nats.Msg, a any) {
		data, err := json.Marshal(a)
		if err != nil {
			return
		}
		if err := m.Respond(data); err != nil {
			cfg.Log.Warn().Err(err).Msg("identity check not answered")
		}
	}
	sub, err := nc.QueueSubscribe(subject, "agents", func(m *nats.Msg) {
		// NATS lets a responder publish once on a request's reply subject
		// whatever its permissions deny: answered elsewhere than a bot's
		// inbox, an answer would be the agent writing, in its name, where
		// whoever sent the request chose (another cluster's audit subject
		// or answers).
		if !strings.HasPrefix(m.Reply, event.BotInboxPrefix+".") {
			cfg.Log.Warn().Str("reply", m.Reply).Msg("a check whose reply subject is no bot's inbox not answered")
			return
		}
		a, read := answerCheck(ctx, cfg, &seen, now(), m.Data)
		if read == nil {
			respond(m, a)
			return
		}
		select {
		case slots <- struct{}{}:
			reading.Go(func() {
				defer func() { <-slots }()
				respond(m, readPreflight(ctx, cfg, *read))
			})
		default:
			respond(m, PreflightAnswer{Check: read.Nonce, Error: "busy reading other preflights"})
		}
	})
	if err != nil {
		return fmt.Errorf("approval: identity checks: %w", err)
	}
	<-ctx.Done()
	err = sub.Unsubscribe()
	reading.Wait()
	return err
}

// answerCheck answers data: a CheckAnswer, or a PreflightAnswer refusing a
// sealed preflight; read is the preflight admitted, to be answered by
// reading (readPreflight).
func answerCheck(ctx context.Context, cfg CheckConfig, seen *nonces, now time.Time, data []byte) (a any, read *PreflightCheck) {
	var s Seal
	if err := decodeStrict(data, &s); err != nil {
		return CheckAnswer{Error: "not a sealed check"}, nil
	}
	var c Check
	if err := s.open(identityContext, cfg.Keys, &c); err != nil {
		var pc PreflightCheck
		if s.open(preflightContext, cfg.Keys, &pc) == nil {
			if refused := admitPreflight(cfg, seen, now, pc); refused != nil {
				return *refused, nil
			}
			return nil, &pc
		}
		// The nonce echoed all the same, so that the bot shows why (a key
		// it has rotated, a newer bot's field) rather than "no answer it
		// could trust": an error grants nothing.
		var n struct {
			Nonce string `json:"nonce"`
		}
		_ = json.Unmarshal(s.Body, &n)
		return CheckAnswer{Check: n.Nonce, Error: "the check does not verify: " + err.Error()}, nil
	}
	ca := judgeCheck(ctx, cfg, now, c)
	ca.Check = c.Nonce
	return ca, nil
}

// judgeCheck answers the verified check c.
func judgeCheck(ctx context.Context, cfg CheckConfig, now time.Time, c Check) CheckAnswer {
	if c.Source != cfg.Source || now.Sub(c.IssuedAt) > time.Minute || c.IssuedAt.After(now.Add(time.Minute)) {
		return CheckAnswer{Error: "a check for another agent, or stale"}
	}
	id, err := actingIdentity(cfg.Identities, cfg.Source, c.Approver, c.Via, c.Email)
	switch {
	case errors.Is(err, ErrNoIdentity) && (cfg.Identities.Required || c.Required):
		// The stricter of the bot's word and the agent's own: as at
		// execution (agent.actor).
		return CheckAnswer{NoIdentity: true}
	case err != nil:
		// Not required: the agent acts as itself, nothing to check.
		return CheckAnswer{}
	case cfg.Access == nil:
		return CheckAnswer{Identity: &id, Error: "this agent cannot review access"}
	}
	if err := c.Change.Validate(); err != nil {
		return CheckAnswer{Identity: &id, Error: err.Error()}
	}
	actx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	missing, err := cfg.Access(actx, id, c.Change)
	if err != nil && len(missing) == 0 {
		return CheckAnswer{Identity: &id, Error: err.Error()}
	}
	return CheckAnswer{Identity: &id, Missing: missing}
}
