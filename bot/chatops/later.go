package chatops

import "context"

// LaterFunc posts a further reply into the conversation a handler
// answered (the request's response_url; the console prints it). It is
// for outcomes that come after the handler returned, such as the result
// of an action that was queued; Slack accepts a few such posts within 30
// minutes of the request.
type LaterFunc func(r Reply)

type laterKey struct{}

// Later returns the LaterFunc of the request ctx belongs to, or nil when
// the transport has no way to reply later.
func Later(ctx context.Context) LaterFunc {
	f, _ := ctx.Value(laterKey{}).(LaterFunc)
	return f
}

// WithLater returns ctx carrying f, for transports (and tests) that call
// a Handler themselves.
func WithLater(ctx context.Context, f LaterFunc) context.Context {
	return context.WithValue(ctx, laterKey{}, f)
}
