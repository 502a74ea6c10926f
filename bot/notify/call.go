package notify

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/internal/jitter"
	"github.com/slack-go/slack"
)

// One Slack call: its pace (gate: a token bucket per limit), its deadline,
// whether its failure is worth retrying (retry bool, err, as
// alertmanager's notifiers say it), how the channel pauses after it, and
// the shorter forms of a message Slack refused for its size.

// defaultRetryAfter is the pause after a 429 that came without a
// Retry-After header; Slack always sends one, so this is a safety net.
const defaultRetryAfter = 10 * time.Second

// transientCodes are Slack error codes (HTTP 200, "ok": false) worth
// retrying. Every other code is permanent: retrying channel_not_found,
// not_in_channel, invalid_blocks, is_archived, invalid_auth... forever
// would block the Key and never succeed.
var transientCodes = map[string]bool{
	"internal_error":      true,
	"fatal_error":         true,
	"service_unavailable": true,
	"request_timeout":     true,
	"ratelimited":         true,
	"team_added_to_org":   true,
}

// classify says, like alertmanager's notifiers, whether a failed call is
// worth retrying: 429s, 5xx, network errors and timeouts are; Slack's
// application errors and client-side encoding errors are not.
func classify(err error) (retry bool, outcome string) {
	if _, limited := retryAfter(err); limited {
		return true, outcomeRateLimited
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return sc.Code >= http.StatusInternalServerError, outcomeFor(sc.Code >= http.StatusInternalServerError)
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return transientCodes[se.Err], outcomeFor(transientCodes[se.Err])
	}
	if errorCode(err) == "invalid_blocks" {
		return false, outcomePermanent
	}
	return true, outcomeRetry
}

// errorLabels are the Slack error codes hcpbot_slack_errors_total names;
// others count as "other", so a Slack that invents codes cannot grow the
// metric without bound.
var errorLabels = map[string]bool{
	"invalid_blocks":      true,
	"msg_too_long":        true,
	"msg_blocks_too_long": true,
	"message_not_found":   true,
	"no_text":             true,
	"cant_update_message": true,
}

func errorLabel(code string) string {
	switch {
	case code == "":
		return "other"
	case unpostableCodes[code], errorLabels[code], transientCodes[code]:
		return code
	}
	return "other"
}

func outcomeFor(retry bool) string {
	if retry {
		return outcomeRetry
	}
	return outcomePermanent
}

// retryAfter returns how long Slack asked us to wait, if it did.
func retryAfter(err error) (time.Duration, bool) {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return max(rl.RetryAfter, time.Second), true
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) && sc.Code == http.StatusTooManyRequests {
		return defaultRetryAfter, true
	}
	return 0, false
}

// errorCode is Slack's error code; blocks slack-go could not even encode
// count as invalid_blocks.
func errorCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	var me *json.MarshalerError
	var ue *json.UnsupportedValueError
	var te *json.UnsupportedTypeError
	if errors.As(err, &me) || errors.As(err, &ue) || errors.As(err, &te) {
		return "invalid_blocks"
	}
	return ""
}

// attemptCtx bounds one attempt. It is detached from the worker's context
// so that stopping never abandons a call halfway: a post whose answer we
// dropped would leave a root this instance cannot record, and the next
// instance would post it again.
func (q *chanQueue) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), q.s.cfg.AttemptTimeout)
}

// call makes one Slack call, counted in m, and reports, like
// alertmanager's notifiers, whether a failure is worth retrying.
func call(ctx context.Context, m *metrics, method string, fn func(context.Context) (string, error)) (ts string, retry bool, err error) {
	ts, err = fn(ctx)
	outcome := outcomeOK
	if err != nil {
		retry, outcome = classify(err)
		if code := errorCode(err); code != "" {
			m.errors.WithLabelValues(errorLabel(code)).Inc()
		}
	}
	m.calls.WithLabelValues(method, outcome).Inc()
	return ts, retry, err
}

// fallbackText is how long the text of a fallback may be: Slack
// recommends keeping a message's text under 4,000 characters, and always
// takes that much.
const fallbackText = 4000

// shortText is how long the last fallback's text may be, before its note.
const shortText = 500

// shortNote ends the last fallback: what the reader misses, and where
// the details are.
const shortNote = "\n… _(shortened: Slack refused the whole message as too long; the evidence is in this incident's thread and in `/hcp status`)_"

// form is how much of a message is sent. Each refusal of a message for
// its size or blocks gets the next, shorter form; the last is short
// enough for any of Slack's limits, so a message is never dropped for
// its size.
type form uint8

const (
	formFull  form = iota // the text and the blocks
	formText              // the text alone, cut to fallbackText
	formShort             // the text's start, cut to shortText, and shortNote
)

// options renders a message for chat.postMessage or chat.update in form f.
func options(text string, blocks []slack.Block, f form, update bool, threadTS string, extra ...slack.MsgOption) []slack.MsgOption {
	if text == "" {
		text = blockkit.Truncate(PlainText(blocks), blockkit.MaxSectionText)
	}
	if text == "" {
		text = "(no text)"
	}
	switch f {
	case formText:
		text = blockkit.Truncate(text, fallbackText)
	case formShort:
		text = blockkit.Truncate(text, shortText) + shortNote
	}
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	switch {
	case f == formFull && len(blocks) > 0:
		opts = append(opts, slack.MsgOptionBlocks(blocks...))
	case update:
		// chat.update keeps what it is not sent: clear the old blocks, or
		// they would go on showing a stale rendering.
		opts = append(opts, slack.MsgOptionBlocks())
	}
	if threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(threadTS))
	}
	return append(opts, extra...)
}

// sizeCodes are Slack's refusals of a message for its size or its blocks:
// invalid_blocks (blocks over a limit), msg_too_long (a text too long),
// msg_blocks_too_long (the undocumented limit on a message's total size,
// seen at 11-13k characters of text; bolt-js #2509, #2867).
var sizeCodes = map[string]bool{"invalid_blocks": true, "msg_too_long": true, "msg_blocks_too_long": true}

// fallback arranges a retry of an item Slack refused for its size or
// blocks, in the next shorter form (f). It returns false when err is no
// such refusal, or the shortest form was refused too (then dropped).
func fallback(err error, f *form) bool {
	if !sizeCodes[errorCode(err)] || *f >= formShort {
		return false
	}
	*f++
	return true
}

// failed pauses the channel after a retryable failure: for a 429 exactly
// as long as Slack asked, also stopping the method's own budget (chat.update
// for the whole workspace); otherwise with capped, jittered backoff.
func (q *chanQueue) failed(now time.Time, method, key string, err error) {
	var until time.Time
	ev := q.s.log.Warn().Err(err).Str("method", method).Str("channel", q.channel).Str("key", key)
	if ra, limited := retryAfter(err); limited {
		until = now.Add(ra)
		q.s.m.retryAfter.Add(ra.Seconds())
		if method == methodUpdate {
			q.s.update.block(until)
		} else {
			q.post.block(until)
		}
		ev.Dur("retry_after", ra).Msg("Slack rate limit: pausing")
	} else {
		q.mu.Lock()
		q.failures++
		n := q.failures
		q.mu.Unlock()
		d := backoff(n, q.s.cfg.BackoffBase, q.s.cfg.BackoffMax)
		until = now.Add(d)
		ev.Int("failures", n).Dur("backoff", d).Msg("Slack call failed: retrying")
	}
	q.mu.Lock()
	if until.After(q.pausedUntil) {
		q.pausedUntil = until
	}
	q.mu.Unlock()
}

func (q *chanQueue) succeeded() {
	q.mu.Lock()
	q.failures = 0
	q.mu.Unlock()
}

// gate paces one Slack rate limit: a token bucket (our own estimate of
// Slack's budget, so we rarely hit a 429 at all) plus a hard stop until a
// Retry-After Slack gave us has elapsed.
type gate struct {
	mu     sync.Mutex
	rate   float64 // tokens per second; <= 0 means unlimited
	burst  float64
	tokens float64
	last   time.Time
	until  time.Time // no call before this
}

// epsilon absorbs float rounding, so that a gate readyAt calls ready also
// takes, instead of the worker spinning for a nanosecond's worth of token.
const epsilon = 1e-9

func newGate(rate float64, burst int) *gate {
	b := float64(max(burst, 1))
	return &gate{rate: rate, burst: b, tokens: b, last: time.Now()}
}

func (g *gate) refill(now time.Time) {
	if now.After(g.last) {
		g.tokens = min(g.burst, g.tokens+now.Sub(g.last).Seconds()*g.rate)
		g.last = now
	}
}

// readyAt is the earliest time take can succeed; not after now means now.
func (g *gate) readyAt(now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := now
	if g.rate > 0 {
		g.refill(now)
		if g.tokens < 1-epsilon {
			at = now.Add(time.Duration((1 - g.tokens) / g.rate * float64(time.Second)))
		}
	}
	if g.until.After(at) {
		at = g.until
	}
	return at
}

// take spends a token if one is available now.
func (g *gate) take(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.until) {
		return false
	}
	if g.rate <= 0 {
		return true
	}
	g.refill(now)
	if g.tokens < 1-epsilon {
		return false
	}
	g.tokens = max(g.tokens-1, 0)
	return true
}

// block stops the gate until the given time and restarts it with a single
// token: Slack just said we were too fast, so resuming with a full burst
// would only earn the next 429.
func (g *gate) block(until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if until.After(g.until) {
		g.until = until
	}
	if g.rate > 0 && until.After(g.last) {
		g.tokens, g.last = 1, until
	}
}

// backoff is the pause after the n-th consecutive failure (n >= 1):
// doubling from base up to limit, jittered so that replicas that failed
// together do not retry together (package jitter).
func backoff(n int, base, limit time.Duration) time.Duration { return jitter.Backoff(n, base, limit) }
