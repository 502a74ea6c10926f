package actions

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// definite are the executor's answers that the same request gets again
// however often it is sent: the cluster or the request has to change first.
var definite = []error{ErrConflict, ErrInvalid, ErrRejected, ErrPortCollision, ErrNotKubeVirt, ErrKubeconfig}

// Transient reports whether err, returned by the executor, may go away if
// the same request is run again unchanged: the API server was overloaded
// or unavailable (InternalError, ServiceUnavailable, ServerTimeout,
// Timeout, TooManyRequests, a 5xx from a proxy in front of it), the
// connection failed (refused, reset, unexpected EOF, i/o or TLS handshake
// timeout), or a call ran out of time (context.DeadlineExceeded: the
// approval loop bounds each attempt; when it is the caller's own deadline
// the caller knows from its ctx.Err()). Re-running is safe: a re-run finds
// what an earlier attempt wrote (AnnotationAction, the action id label).
//
// Everything else is definite and false: the executor's sentinels
// (ErrConflict, ErrInvalid, ErrRejected, ErrPortCollision, ErrNotKubeVirt,
// ErrKubeconfig, whatever they wrap), the API server's refusals
// (NotFound of the target, Forbidden, Invalid, Unauthorized, a raw
// Conflict or AlreadyExists: the executor turns the ones a re-run could
// get past into its own retries), unknown errors, and context.Canceled:
// the caller cancelled, so it decides what happens next.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	for _, d := range definite {
		if errors.Is(err, d) {
			return false
		}
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return transientStatus(err, status.Status().Code)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return transientNetwork(err)
}

// transientStatus: an answer of the API server (or of a proxy in front of
// it) that says "not now" rather than "no".
func transientStatus(err error, code int32) bool {
	switch {
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err),
		apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err):
		return true
	}
	switch code {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// transientNetwork: the request may not have reached the API server, or
// its answer did not come back.
func transientNetwork(err error) bool {
	switch {
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err),
		utilnet.IsHTTP2ConnectionLost(err), utilnet.IsTimeout(err),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		// IsTimeout covers i/o timeouts, the TLS handshake timeout and
		// the HTTP client's own timeout (rest.Config.Timeout).
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	var op *net.OpError
	// Any other failure to dial (no route to host, network unreachable):
	// the API server is not reachable right now; nothing was sent.
	return errors.As(err, &op) && op.Op == "dial"
}
