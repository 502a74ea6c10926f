package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/redact"
)

// The preflight of an exposure: before an exposure is proposed, the bot
// asks the agent of its management cluster whether the node ports it
// would forward are free there (only the agent sees that cluster's
// Services), so that a collision is found before two people approve, not
// after. It travels as the identity check does (the same subject, the
// agent's response permission, a fresh nonce echoed by the answer,
// strictly decoded answers, the bot's seal under a context of its own)
// and grants nothing: the agent only reads (actions.Executor.Preflight),
// and execution checks the ports again before any write.

// preflightContext separates the seals of preflights from the rest: no
// preflight passes for an identity check or an order, nor one of those
// for a preflight.
const preflightContext = "hcpbot-preflight-v1\n"

// PreflightCheck is the bot's question to the agent of Source: would
// Change, an exposure, be refused now for its node ports? Nonce is fresh
// for each question; the answer echoes it, and the agent answers each
// nonce once.
type PreflightCheck struct {
	Source   string         `json:"source"`
	Change   actions.Change `json:"change"`
	IssuedAt time.Time      `json:"issuedAt"`
	Nonce    string         `json:"nonce"`
}

// PreflightAnswer is the agent's answer, unsigned like CheckAnswer: Check
// (the nonce) only tells the bot that a reply was written as an answer to
// its preflight.
type PreflightAnswer struct {
	// Check is the nonce of the preflight answered.
	Check     string             `json:"check"`
	Preflight *actions.Preflight `json:"preflight,omitempty"`
	// Code is set, with Error, when the exposure would be refused
	// whatever its ports (CodeInvalid, CodeNotKubeVirt).
	Code Code `json:"code,omitempty"`
	// Error says why the agent could not tell, or (with Code) why the
	// exposure would be refused.
	Error string `json:"error,omitempty"`
}

// preflightTimeout bounds the bot's wait for the agent's answer;
// preflightWork the agent's reads, so that its answer arrives within it.
const (
	preflightTimeout = 4 * time.Second
	preflightWork    = 3 * time.Second
)

// preflight asks the agent of source about the exposure ch before it is
// proposed. err refuses the proposal: a *actions.PortCollisionError
// naming each taken port and its holder (errors.Is ErrPortCollision), or
// an error wrapping actions.ErrInvalid or actions.ErrNotKubeVirt. Without
// an answer it can trust, the proposal is made with note saying that the
// ports are checked when it runs.
//
// The answer is trusted as an identity check's is (checkIdentity): only
// a PreflightAnswer, decoded strictly, echoing this preflight's nonce. A
// forged one that read the nonce can refuse a proposal (what deleting it
// from the store does too) or drop the note; it cannot make a taken port
// pass execution, which reads the cluster again before any write.
func (f *Flow) preflight(ctx context.Context, source string, ch actions.Change) (note string, err error) {
	nonce := newNonce()
	subject, data, err := f.sealCheck(source, preflightContext, PreflightCheck{Source: source, Change: ch, IssuedAt: f.now().UTC(), Nonce: nonce})
	if err != nil {
		return "", err
	}
	var a PreflightAnswer
	ignored, err := f.askCheck(ctx, subject, data, preflightTimeout, func(b []byte) bool {
		var got PreflightAnswer
		if decodeStrict(b, &got) != nil || got.Check != nonce {
			return false
		}
		a = got
		return true
	})
	log := f.log.With().Str("action", ch.ID).Str("source", source).Logger()
	if ignored > 0 {
		log.Warn().Int("ignored", ignored).Msg("replies to the exposure's preflight that were no answer to it ignored (a stream capturing the checks, or a forged reply)")
	}
	unchecked := func(why string) string {
		return fmt.Sprintf("Node ports not checked yet: the agent of %s %s; they are checked when the exposure runs, before anything is written.", source, why)
	}
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("no answer to the exposure's preflight; its node ports are checked at execution")
		return unchecked("did not answer whether they are free (" + shortErr(err) + ")"), nil
	case a.Preflight != nil && a.Preflight.Collision != nil:
		return "", actions.RemotePortCollision(*a.Preflight.Collision, "")
	case a.Code == CodeInvalid || a.Code == CodeNotKubeVirt:
		return "", fmt.Errorf("%w: %s", a.Code.Err(), redact.RedactText(a.Error))
	case a.Error != "" || a.Preflight == nil:
		log.Warn().Str("error", a.Error).Msg("the agent could not check the exposure's node ports")
		return unchecked("could not check them (" + redact.RedactText(a.Error) + ")"), nil
	}
	return freeNote(source, a.Preflight), nil
}

// freeNote says what the agent found free.
func freeNote(source string, pf *actions.Preflight) string {
	var parts []string
	switch {
	case len(pf.Free) == 1:
		parts = append(parts, fmt.Sprintf("Node port %s is free in the management cluster now (checked by the agent of %s).", actions.JoinPorts(pf.Free), source))
	case len(pf.Free) > 1:
		parts = append(parts, fmt.Sprintf("Node ports %s are free in the management cluster now (checked by the agent of %s).", actions.JoinPorts(pf.Free), source))
	}
	switch {
	case pf.Allocated == 1:
		parts = append(parts, "The node port the hosted API server allocates is checked when the exposure runs.")
	case pf.Allocated > 1:
		parts = append(parts, fmt.Sprintf("The %d node ports the hosted API server allocates are checked when the exposure runs.", pf.Allocated))
	}
	return strings.Join(parts, " ")
}

// admitPreflight refuses the verified preflight c (the answer) unless
// it is for this agent's own cluster, fresh, and its nonce new to this
// replica; nil admits it, to be read (readPreflight).
func admitPreflight(cfg CheckConfig, seen *nonces, now time.Time, c PreflightCheck) *PreflightAnswer {
	refuse := func(why string) *PreflightAnswer { return &PreflightAnswer{Check: c.Nonce, Error: why} }
	switch {
	case c.Source != cfg.Source || now.Sub(c.IssuedAt) > time.Minute || c.IssuedAt.After(now.Add(time.Minute)):
		return refuse("a preflight for another agent, or stale")
	case cfg.Preflight == nil:
		return refuse("this agent cannot check exposures")
	}
	switch err := seen.first(c.Nonce, now); {
	case errors.Is(err, errTooManyNonces):
		return refuse(err.Error())
	case err != nil:
		// The bot asks each nonce once; a second copy is a replay
		// (anyone who can publish on the subject and read a preflight).
		return refuse("a preflight already answered (replayed)")
	}
	return nil
}

// readPreflight answers the admitted preflight c by reading, within
// preflightWork.
func readPreflight(ctx context.Context, cfg CheckConfig, c PreflightCheck) PreflightAnswer {
	a := PreflightAnswer{Check: c.Nonce}
	pctx, cancel := context.WithTimeout(ctx, preflightWork)
	defer cancel()
	pf, err := cfg.Preflight(pctx, c.Change)
	switch {
	case errors.Is(err, actions.ErrInvalid), errors.Is(err, actions.ErrNotKubeVirt):
		a.Code, a.Error = CodeOf(err), redact.RedactText(err.Error())
	case err != nil:
		cfg.Log.Warn().Err(err).Str("action", c.Change.ID).Msg("exposure preflight: the cluster could not be read")
		a.Error = redact.RedactText(err.Error())
	case pf == nil:
		a.Error = "no preflight"
	default:
		a.Preflight = pf
	}
	return a
}

// nonces remembers the preflights an agent replica answered, for as long
// as a preflight is fresh, so that none is answered twice.
type nonces struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// maxNonces bounds the memory of answered preflights: past it, within
// the freshness window, preflights are refused (the bot proposes with a
// note) rather than answered twice.
const maxNonces = 4096

// errTooManyNonces: the replica remembers maxNonces preflights, all
// still fresh; it answers no new one rather than forget one it answered.
var errTooManyNonces = errors.New("too many preflights within their freshness; ports checked at execution")

// first remembers nonce, or says why it is not new: "" or seen before,
// or errTooManyNonces.
func (n *nonces) first(nonce string, now time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = map[string]time.Time{}
	}
	if _, ok := n.seen[nonce]; ok || nonce == "" {
		return errors.New("a nonce seen before")
	}
	if len(n.seen) >= maxNonces {
		for k, at := range n.seen {
			// Fresh for a minute either side of its issue: kept for both.
			if now.Sub(at) > 2*time.Minute {
				delete(n.seen, k)
			}
		}
		if len(n.seen) >= maxNonces {
			return errTooManyNonces
		}
	}
	n.seen[nonce] = now
	return nil
}

// maxPreflights bounds the preflights a replica reads at once (each
// lists the Services of both clusters): more are answered busy.
const maxPreflights = 4
