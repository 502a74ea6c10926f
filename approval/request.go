package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/redact"
)

// Request is the bot's order to the agent of Source: run the approved
// proposal ID, whose sealed terms have digest Proposal, now. The bot
// seals it when it sends it; the agent then reads the proposal from the
// store and runs it only if Permit says so. The order itself proves
// nothing about approval: it says that the bot, which alone holds the key,
// wants it run now (IssuedAt bounds how long a copy stays usable).
type Request struct {
	ID       string    `json:"id"`
	Source   string    `json:"source"`
	Proposal string    `json:"proposal"`
	IssuedAt time.Time `json:"issuedAt"`
}

// MaxRequestAge is how long after sealing the agent accepts an order: the
// bot sends it right after the approval completes (and again, sealed
// afresh, from its recovery sweep), so anything older is a replay.
const MaxRequestAge = QueueHorizon

// MaxRequestBytes bounds an order on the wire; real ones are a few
// hundred bytes.
const MaxRequestBytes = 16 << 10

// ErrUnauthorized: the agent could not verify that the request may run
// (its order, or the proposal's seals). Nothing was changed; the refusal
// is audited.
var ErrUnauthorized = errors.New("action request not authorized")

// ErrInternal: the agent could not carry out the action for a reason that
// is not the request's fault, and gave up at its deadline.
var ErrInternal = errors.New("action failed in the agent")

// ErrNoAnswer: no agent answered before the deadline; it refuses the
// request afterwards, so it will not run.
var ErrNoAnswer = errors.New("the agent did not pick the request up")

// ErrUnknown: the agent began the change and could not tell, by its
// deadline, whether it landed (the API server kept failing).
var ErrUnknown = errors.New("outcome unknown")

// Code classifies an answer that is not a success, so that the bot can
// tell the user what to do without parsing error texts.
type Code string

// Codes; each maps onto one sentinel error (Code.Err).
const (
	CodeConflict      Code = "conflict"
	CodeNotKubeVirt   Code = "not-kubevirt"
	CodePortCollision Code = "port-collision"
	CodeInvalid       Code = "invalid"
	CodeRejected      Code = "rejected"
	CodeUnauthorized  Code = "unauthorized"
	CodeTooLate       Code = "too-late"
	CodeNoAnswer      Code = "no-answer"
	CodeUnknown       Code = "unknown"
	CodeInternal      Code = "internal"
)

var codes = []struct {
	code Code
	err  error
}{
	// A port collision first: PortCollisionError also wraps the API error.
	{CodePortCollision, actions.ErrPortCollision},
	{CodeConflict, actions.ErrConflict},
	{CodeNotKubeVirt, actions.ErrNotKubeVirt},
	{CodeInvalid, actions.ErrInvalid},
	{CodeRejected, actions.ErrRejected},
	{CodeUnauthorized, ErrUnauthorized},
	{CodeTooLate, ErrTooLate},
	{CodeNoAnswer, ErrNoAnswer},
	{CodeUnknown, ErrUnknown},
}

// CodeOf classifies err.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return CodeInternal
}

// Err returns the sentinel error of c; unknown codes (a newer agent) are
// ErrInternal.
func (c Code) Err() error {
	i := slices.IndexFunc(codes, func(e struct {
		code Code
		err  error
	}) bool {
		return e.code == c
	})
	if i < 0 {
		return ErrInternal
	}
	return codes[i].err
}

// Result is the agent's answer to a request, stored in the results
// bucket under the action id (only the agent of the source may write
// there). Running marks an execution begun and not finished: an agent
// that died meanwhile left it, and the next one runs the request again.
type Result struct {
	ID string `json:"id"`
	// Proposal is the digest of the terms this answers: another proposal
	// under a reused id is not answered with it.
	Proposal string `json:"proposal,omitempty"`
	Running  bool   `json:"running,omitempty"`
	// Change is the executor's report, on success (and on some failures).
	Change *actions.Result `json:"change,omitempty"`
	Code   Code            `json:"code,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Collision details a CodePortCollision: the refused node ports and
	// free alternatives.
	Collision *actions.PortCollision `json:"collision,omitempty"`
	// Order is the hex SHA-256 of the message refused, for a refusal of
	// what the agent could not verify (wire.RefusalKey): the bot that
	// sent those bytes knows them.
	Order string `json:"order,omitempty"`
	// Actors are who asked and who approved, as the seals proved them.
	RequestedBy string    `json:"requestedBy,omitempty"`
	Approvers   []string  `json:"approvers,omitempty"`
	At          time.Time `json:"at"`
}

// Err is nil for a success, else an error wrapping the code's sentinel
// (errors.Is works across the wire) with the agent's text.
func (r Result) Err() error {
	if r.Code == "" && r.Error == "" {
		if r.Change == nil {
			return fmt.Errorf("%w: empty answer", ErrInternal)
		}
		return nil
	}
	if r.Code == CodePortCollision && r.Collision != nil {
		return actions.RemotePortCollision(*r.Collision, r.Error)
	}
	return fmt.Errorf("%w: %s", r.Code.Err(), r.Error)
}

// failure is the answer for err, its text redacted: error texts quote
// proxy URLs from the cluster, and the answer is shown in chat.
func failure(id string, err error) Result {
	r := Result{ID: id, Error: redact.RedactText(err.Error()), Code: CodeOf(err)}
	var pc *actions.PortCollisionError
	if errors.As(err, &pc) && len(pc.Ports) > 0 {
		c := pc.PortCollision
		r.Collision = &c
	}
	return r
}

// orderDigest names the bytes of a request on the wire.
func orderDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func decodeResult(data []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return Result{}, fmt.Errorf("%w: undecodable result: %w", ErrInternal, err)
	}
	return r, nil
}
