package approval

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
)

// Acting as the approver (package identity): the agent makes each change
// as the Kubernetes identity of the person whose sealed approval completed
// the decision, so the cluster's RBAC has the last word. When a person
// approves, the bot asks the agent whether that identity may make the
// change (SubjectAccessReviews); an approval it may not make does not
// count. Which identity is the agent's own reading of its map, from the
// approver the bot sealed — with the Slack group or e-mail the bot sealed
// beside it, which only the bot can resolve.

// ErrNotPermitted: the approver's Kubernetes identity may not make the
// change (the agent's SubjectAccessReviews say which permission lacks).
var ErrNotPermitted = errors.New("the approver's Kubernetes identity may not make this change")

// ErrNoIdentity wraps identity.ErrNoIdentity: with identities.required,
// an approver without an identity on the cluster cannot complete a
// decision, and the agent acts as nobody else.
var ErrNoIdentity = identity.ErrNoIdentity

// CodeNoIdentity is the answer's code of a change the agent would not
// make for want of the approver's identity.
const CodeNoIdentity Code = "no-identity"

// CodeNotPermitted is the answer's code of a change refused because a
// counted approver's identity may not make it (agent.approversMay).
const CodeNotPermitted Code = "not-permitted"

func init() {
	codes = append(codes, struct {
		code Code
		err  error
	}{CodeNoIdentity, ErrNoIdentity}, struct {
		code Code
		err  error
	}{CodeNotPermitted, ErrNotPermitted})
}

// Emails looks up a Slack user's e-mail address, for identities derived
// from it (identity.Entry.EmailPrefix).
type Emails interface {
	Email(ctx context.Context, userID string) (string, error)
}

// identityContext separates the seals of identity checks from the rest.
const identityContext = "hcpbot-identity-check-v1\n"

// Check is the bot's question to the agent of Source: may Approver's
// identity (found through Via, a Slack group, or Email) make Change?
// Required: the bot maps the approver (it asks only then) and so
// requires the agent to act as them, as if the agent's own configuration
// had identities.required: an agent that maps nobody for them says so
// (NoIdentity) rather than "nothing to check". Nonce is fresh for each
// check; the answer echoes it.
type Check struct {
	Source   string         `json:"source"`
	Change   actions.Change `json:"change"`
	Approver string         `json:"approver"`
	Via      string         `json:"via,omitempty"`
	Email    string         `json:"email,omitempty"`
	IssuedAt time.Time      `json:"issuedAt"`
	Required bool           `json:"required,omitempty"`
	Nonce    string         `json:"nonce"`
}

// CheckAnswer is the agent's answer. It is not signed (the agent has no
// key): Check, the check's nonce, only tells the bot that a reply was
// written as an answer to its check, so that anything else arriving on
// the reply subject — a JetStream publish acknowledgement of a stream
// that captures the checks, an answer to another check — does not count.
// Whatever the answer says, the change is still written as the
// approver's identity and Kubernetes RBAC decides then.
type CheckAnswer struct {
	// Check is the nonce of the check answered.
	Check    string             `json:"check"`
	Identity *identity.Identity `json:"identity,omitempty"`
	// Missing names each permission the identity lacks; empty: allowed.
	Missing []string `json:"missing,omitempty"`
	// Error says why the agent could not tell.
	Error string `json:"error,omitempty"`
	// NoIdentity: the approver has none on this cluster.
	NoIdentity bool `json:"noIdentity,omitempty"`
}

// checkTimeout bounds the bot's wait for the agent's answer: an agent
// that is down answers at once (NATS: no responders); one that hangs is
// not waited for, and Kubernetes RBAC decides when the change runs.
const checkTimeout = 3 * time.Second

// approverIdentity is what the bot seals with an approval: the Slack group
// through which userID maps to an identity, or the e-mail an EmailPrefix
// entry needs, and the identity, or ErrNoIdentity (with identities
// required, an error; without, the agent acts as itself).
func (f *Flow) approverIdentity(ctx context.Context, source, userID string) (via, email string, id identity.Identity, err error) {
	var groups []string
	for _, e := range f.identities.Entries {
		if !e.Group() || slices.Contains(groups, e.Slack) || f.groups == nil {
			continue
		}
		members, gerr := f.groups.GroupMembers(ctx, e.Slack)
		if gerr != nil {
			return "", "", id, fmt.Errorf("%w: group %s: %w", ErrGroupLookup, e.Slack, gerr)
		}
		if slices.Contains(members, userID) {
			groups = append(groups, e.Slack)
		}
	}
	id, entry, err := f.identities.For(source, userID, groups, "")
	if err != nil && entry.EmailPrefix != "" && f.emails != nil {
		if email, err = f.emails.Email(ctx, userID); err != nil {
			return "", "", id, fmt.Errorf("the Slack e-mail of %s: %w", userID, err)
		}
		id, entry, err = f.identities.For(source, userID, groups, email)
	}
	if err != nil {
		return "", "", id, err
	}
	if entry.Group() {
		via = entry.Slack
	}
	if entry.EmailPrefix == "" {
		email = ""
	}
	return via, email, id, nil
}

// checkIdentity asks the agent of p's source whether userID's identity
// may make p's change. permitted is false with ErrNotPermitted (the
// missing permissions named) or ErrNoIdentity; an agent that does not
// answer leaves the question open (nil error, note says so).
//
// The reply is not authenticated (core NATS; the agent has no key), and
// more than the agent can reply: whoever holds the bot's NATS user may
// create a stream whose subjects take in the checks, and the server then
// acknowledges each one on the reply subject before the agent has asked
// the API server; an acknowledgement decoded loosely reads as an answer
// with nothing missing. So only a CheckAnswer, decoded strictly, that
// echoes this check's fresh nonce counts; anything else is skipped while
// the bot waits for the agent, and if no answer it can trust comes in
// time the approval counts as with an agent that did not answer: with a
// note, RBAC deciding at the write. It decides there in any case (the
// agent writes as the approver), so an answer forged by someone who also
// read the nonce gains the attacker only the note's absence.
func (f *Flow) checkIdentity(ctx context.Context, p Proposal, userID, via, email string) (note string, err error) {
	nonce := newNonce()
	subject, data, err := f.sealCheck(p.Source, identityContext, Check{Source: p.Source, Change: p.Change, Approver: userID, Via: via, Email: email, IssuedAt: f.now().UTC(), Required: true, Nonce: nonce})
	if err != nil {
		return "", err
	}
	var a CheckAnswer
	ignored, err := f.askCheck(ctx, subject, data, checkTimeout, func(b []byte) bool {
		got, err := decodeAnswer(b, nonce)
		a = got
		return err == nil
	})
	if ignored > 0 {
		f.log.Warn().Int("ignored", ignored).Str("action", p.ID).Str("source", p.Source).
			Msg("replies to the identity check that were no answer to it ignored (a stream capturing the checks, or a forged reply)")
	}
	switch {
	case err != nil && ignored > 0:
		f.log.Warn().Err(err).Str("action", p.ID).Msg("no answer to the identity check the bot could trust; RBAC decides when the change runs")
		replies := "replies"
		if ignored == 1 {
			replies = "reply"
		}
		return fmt.Sprintf("the agent of %s gave no answer the bot could trust whether your Kubernetes identity may make it (%d other %s ignored, %s); the change runs as that identity and Kubernetes RBAC decides then", p.Source, ignored, replies, shortErr(err)), nil
	case err != nil:
		f.log.Warn().Err(err).Str("action", p.ID).Msg("the agent did not answer the identity check; RBAC decides when the change runs")
		return fmt.Sprintf("the agent of %s did not answer whether your Kubernetes identity may make it (%s); the change runs as that identity and Kubernetes RBAC decides then", p.Source, shortErr(err)), nil
	case a.NoIdentity:
		return "", fmt.Errorf("%w: %s on %s (the agent's identities)", ErrNoIdentity, userID, p.Source)
	case a.Error != "":
		return fmt.Sprintf("the agent of %s could not check your Kubernetes identity's permissions (%s); the change runs as that identity and Kubernetes RBAC decides then", p.Source, a.Error), nil
	case len(a.Missing) > 0:
		who := ""
		if a.Identity != nil {
			who = " (" + a.Identity.String() + ")"
		}
		return "", fmt.Errorf("%w: your identity%s lacks %s", ErrNotPermitted, who, strings.Join(a.Missing, "; "))
	}
	return "", nil
}

// sealCheck seals v, a question for the agent of source, under context:
// the subject to ask on and the bytes to send.
func (f *Flow) sealCheck(source, context string, v any) (subject string, data []byte, err error) {
	if subject, err = event.IdentityCheckSubject(source); err != nil {
		return "", nil, err
	}
	s, err := f.signer.seal(context, v)
	if err != nil {
		return "", nil, err
	}
	data, err = json.Marshal(s)
	return subject, data, err
}

// askCheck sends the sealed check data on subject and waits, until
// timeout, for the first reply that answers it (answers, which decodes
// it strictly and checks that it echoes the check's nonce). ignored
// counts the replies that did not; err is the wait's end without an
// answer (nats.ErrNoResponders at once when nobody listens on subject).
func (f *Flow) askCheck(ctx context.Context, subject string, data []byte, timeout time.Duration, answers func([]byte) bool) (ignored int, err error) {
	// A reply subject of its own (the bot's inbox prefix), not the
	// connection's request mux: every reply is seen, not just the first.
	inbox := f.nc.NewInbox()
	sub, err := f.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, fmt.Errorf("the check's reply subject: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := f.nc.PublishRequest(subject, inbox, data); err != nil {
		return 0, fmt.Errorf("the check: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		msg, err := sub.NextMsgWithContext(cctx)
		switch {
		case errors.Is(err, nats.ErrSlowConsumer):
			// Replies were dropped (a flood): the wait goes on.
			ignored++
			continue
		case err != nil:
			return ignored, err
		case len(msg.Data) == 0 && msg.Header.Get("Status") == noRespondersStatus:
			return ignored, nats.ErrNoResponders
		}
		if answers(msg.Data) {
			return ignored, nil
		}
		ignored++
	}
}

// noRespondersStatus is the status the server replies with when nobody
// subscribes to a request's subject (nats.go's own requests turn it into
// nats.ErrNoResponders).
const noRespondersStatus = "503"

// decodeAnswer reads data as the answer to the check of nonce.
func decodeAnswer(data []byte, nonce string) (CheckAnswer, error) {
	var a CheckAnswer
	if err := decodeStrict(data, &a); err != nil {
		return CheckAnswer{}, fmt.Errorf("not an answer to an identity check: %w", err)
	}
	if a.Check != nonce {
		return CheckAnswer{}, errors.New("an answer to another identity check")
	}
	return a, nil
}

// newNonce is a check's nonce: 128 random bits.
func newNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return idEncoding.EncodeToString(b)
}

func shortErr(err error) string {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return "no agent is listening"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "no answer in time"
	}
	return err.Error()
}

// actingIdentity is the identity the agent acts as for approver, by its
// own map: the Slack group the bot sealed as the way to it (the bot alone
// can resolve memberships), or the e-mail it sealed.
func actingIdentity(m identity.Map, source, approver, via, email string) (identity.Identity, error) {
	var groups []string
	if via != "" {
		groups = []string{via}
	}
	id, _, err := m.For(source, approver, groups, email)
	return id, err
}

// completingDecision is the sealed approval that completed p's decision.
func completingDecision(p Proposal) (Decision, bool) {
	for _, d := range slices.Backward(p.Decisions) {
		if d.Verdict == VerdictApprove && d.By == p.DecidedBy {
			return d, true
		}
	}
	return Decision{}, false
}
