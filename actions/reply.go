package actions

import (
	"errors"
	"fmt"

	"github.com/hcpbot/hcpbot/redact"
)

// Code classifies a failed action in a Reply, so that the bot can tell the
// user what to do without parsing error texts.
type Code string

// Reply codes; each maps onto one sentinel error (Code.Err).
const (
	CodeConflict      Code = "conflict"
	CodeNotKubeVirt   Code = "not-kubevirt"
	CodePortCollision Code = "port-collision"
	CodeInvalid       Code = "invalid"
	CodeRejected      Code = "rejected"
	CodeInternal      Code = "internal"
)

// ErrInternal: the agent could not carry out the action for a reason that
// is not the request's fault (API server unreachable, kubeconfig unusable,
// timeout). Whether anything changed is unknown; re-sending is safe.
var ErrInternal = errors.New("action failed in the agent")

// Reply is the agent's answer to an action request: a Result, or an error
// with its Code.
type Reply struct {
	Result *Result `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
	Code   Code    `json:"code,omitempty"`
	// Collision details a CodePortCollision: the refused node ports and
	// free alternatives (nil from agents that predate it).
	Collision *PortCollision `json:"collision,omitempty"`
	// RequestSHA256 is the RequestDigest of the request this answers, when
	// it was a verified one: a later request with the same id but other
	// content is not answered with this result.
	RequestSHA256 string `json:"requestSha256,omitempty"`
}

// CodeOf classifies err. A port collision is checked before the generic
// kinds because PortCollisionError also wraps the API error.
func CodeOf(err error) Code {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrPortCollision):
		return CodePortCollision
	case errors.Is(err, ErrConflict):
		return CodeConflict
	case errors.Is(err, ErrNotKubeVirt):
		return CodeNotKubeVirt
	case errors.Is(err, ErrInvalid):
		return CodeInvalid
	case errors.Is(err, ErrRejected):
		return CodeRejected
	case errors.Is(err, ErrUnauthorized):
		return CodeUnauthorized
	}
	return CodeInternal
}

// Err returns the sentinel error of c; unknown codes (a newer agent) are
// ErrInternal.
func (c Code) Err() error {
	switch c {
	case CodeConflict:
		return ErrConflict
	case CodeNotKubeVirt:
		return ErrNotKubeVirt
	case CodePortCollision:
		return ErrPortCollision
	case CodeInvalid:
		return ErrInvalid
	case CodeRejected:
		return ErrRejected
	case CodeUnauthorized:
		return ErrUnauthorized
	}
	return ErrInternal
}

// Err returns nil for a successful reply, else an error wrapping the
// code's sentinel (errors.Is works across the wire) with the agent's text.
func (r Reply) Err() error {
	if r.Code == "" && r.Error == "" {
		if r.Result == nil {
			return fmt.Errorf("%w: empty reply", ErrInternal)
		}
		return nil
	}
	if r.Code == CodePortCollision && r.Collision != nil {
		pc := &PortCollisionError{PortCollision: *r.Collision, remote: r.Error}
		if len(pc.Ports) > 0 {
			pc.NodePort = pc.Ports[0].NodePort
		}
		if pc.remote == "" {
			pc.remote = ErrPortCollision.Error() + ": node port " + pc.PortCollision.String()
		}
		return pc
	}
	return fmt.Errorf("%w: %s", r.Code.Err(), r.Error)
}

// Outcome is the reply as the sender uses it: the Result (zero when the
// agent sent none) and Err.
func (r Reply) Outcome() (Result, error) {
	var res Result
	if r.Result != nil {
		res = *r.Result
	}
	return res, r.Err()
}

func errorReply(err error) Reply {
	// Error texts may quote proxy URLs from the cluster; the reply is
	// shown in chat and stored with the proposal.
	r := Reply{Error: redact.RedactText(err.Error()), Code: CodeOf(err)}
	var pc *PortCollisionError
	if errors.As(err, &pc) && len(pc.Ports) > 0 {
		c := pc.PortCollision
		r.Collision = &c
	}
	return r
}
