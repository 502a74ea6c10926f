package chatops

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"
)

// Paths Slack is configured to call.
const (
	CommandsPath = "/slack/commands"
	ActionsPath  = "/slack/actions"
)

const (
	headerTimestamp = "X-Slack-Request-Timestamp"
	headerSignature = "X-Slack-Signature"
	// guardTimeout bounds one replay guard lookup.
	guardTimeout = time.Second
)

// ErrNoSigningSecret is returned by NewServer without a signing secret.
var ErrNoSigningSecret = errors.New("chatops: signing secret is required")

// Server is the Slack HTTP front door: CommandsPath and ActionsPath behind
// request authentication. Mount it as an http.Handler.
type Server struct {
	secret string // never logged
	o      options
	m      *metrics
	d      *dispatcher
	mux    *http.ServeMux
}

// NewServer returns a Server verifying requests with Slack's signing secret
// and handing them to h.
func NewServer(signingSecret string, h Handler, opts ...Option) (*Server, error) {
	if signingSecret == "" {
		return nil, ErrNoSigningSecret
	}
	if h == nil {
		return nil, errors.New("chatops: handler is required")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	s := &Server{secret: signingSecret, o: o, m: m, d: newDispatcher(h, o, m), mux: http.NewServeMux()}
	s.mux.Handle(CommandsPath, s.authenticate(http.HandlerFunc(s.serveCommand)))
	s.mux.Handle(ActionsPath, s.authenticate(http.HandlerFunc(s.serveAction)))
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Shutdown waits until running handlers have answered and late replies are
// posted, or ctx ends (then they are cancelled). Requests arriving
// meanwhile get a "restarting" answer. Shut the http.Server down first.
func (s *Server) Shutdown(ctx context.Context) error { return s.d.shutdown(ctx) }

// Authenticate wraps next, for other endpoints Slack signs, in the same
// checks as the Server's own: POST only; body within the limit (400);
// X-Slack-Request-Timestamp and X-Slack-Signature present, timestamp within
// MaxClockSkew of the clock, signature valid per slack.NewSecretsVerifier
// (constant time), not seen before by the ReplayGuard (401). A rejection
// does nothing else; it is logged without secrets and counted in
// hcpbot_slack_requests_rejected_total{reason}. next gets the body intact.
func (s *Server) Authenticate(next http.Handler) http.Handler {
	inner := s.authenticate(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(&acceptCounter{ResponseWriter: w, count: func() { s.m.accepted.WithLabelValues("other").Inc() }}, r)
	})
}

// acceptCounter counts a request accepted once next writes a 2xx.
type acceptCounter struct {
	http.ResponseWriter
	count func()
	wrote bool
}

func (a *acceptCounter) WriteHeader(code int) {
	if !a.wrote && code/100 == 2 {
		a.count()
	}
	a.wrote = true
	a.ResponseWriter.WriteHeader(code)
}

func (a *acceptCounter) Write(b []byte) (int, error) {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	return a.ResponseWriter.Write(b)
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			s.reject(w, r, http.StatusMethodNotAllowed, reasonMethod, nil)
			return
		}
		ts, sig := r.Header.Get(headerTimestamp), r.Header.Get(headerSignature)
		if ts == "" || sig == "" {
			s.reject(w, r, http.StatusUnauthorized, reasonMissingHeaders, nil)
			return
		}
		// Digits only: ParseInt would also take a sign.
		if len(ts) > 12 || strings.TrimLeft(ts, "0123456789") != "" {
			s.reject(w, r, http.StatusUnauthorized, reasonBadTimestamp, nil)
			return
		}
		sec, _ := strconv.ParseInt(ts, 10, 64) // at most 12 digits: cannot fail
		if skew := s.o.now().Unix() - sec; skew > int64(MaxClockSkew.Seconds()) || -skew > int64(MaxClockSkew.Seconds()) {
			s.reject(w, r, http.StatusUnauthorized, reasonStaleTimestamp, nil)
			return
		}
		if r.ContentLength > s.o.maxBody {
			s.reject(w, r, http.StatusBadRequest, reasonTooLarge, nil)
			return
		}
		// MaxBytesReader, not a LimitReader: past the limit the server also
		// closes the connection instead of draining what the client sends.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.maxBody))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			s.reject(w, r, http.StatusBadRequest, reasonTooLarge, nil)
			return
		case err != nil:
			s.reject(w, r, http.StatusBadRequest, reasonMalformed, err)
			return
		}
		sv, err := slack.NewSecretsVerifier(r.Header, s.secret)
		if err == nil {
			_, _ = sv.Write(body) // writes to an HMAC cannot fail
			err = sv.Ensure()
		}
		switch {
		case errors.Is(err, slack.ErrExpiredTimestamp):
			s.reject(w, r, http.StatusUnauthorized, reasonStaleTimestamp, nil)
			return
		case errors.Is(err, slack.ErrMissingHeaders):
			s.reject(w, r, http.StatusUnauthorized, reasonMissingHeaders, nil)
			return
		case err != nil:
			// Neither the expected nor the received signature is logged:
			// either would let the request be replayed.
			s.reject(w, r, http.StatusUnauthorized, reasonBadSignature, nil)
			return
		}
		raw, _ := hex.DecodeString(strings.TrimPrefix(sig, "v0=")) // the verifier decoded it already
		// Bounded: the answer is due within Slack's 3 seconds.
		gctx, cancel := context.WithTimeout(r.Context(), guardTimeout)
		first, err := s.o.guard.FirstSeen(gctx, replayKey(ts, raw))
		cancel()
		switch {
		case err != nil:
			// Failing closed: an approval replayed because NATS hiccuped
			// is worse than asking the user to try again.
			s.reject(w, r, http.StatusServiceUnavailable, reasonGuardError, err)
			return
		case !first:
			s.reject(w, r, http.StatusUnauthorized, reasonReplay, nil)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// reject answers status, counts reason and logs. err must not carry secrets.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, status int, reason string, err error) {
	s.m.rejected.WithLabelValues(reason).Inc()
	ev := s.o.log.Warn()
	if status >= 500 {
		ev = s.o.log.Error()
	}
	ev.Err(err).Str("reason", reason).Int("status", status).Str("path", r.URL.Path).
		Str("remote", r.RemoteAddr).Msg("slack request rejected")
	http.Error(w, http.StatusText(status), status)
}

func (s *Server) rejectRequest(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	if errors.As(err, &re) {
		s.reject(w, r, http.StatusBadRequest, re.Reason, err)
		return
	}
	s.reject(w, r, http.StatusBadRequest, reasonMalformed, err)
}

func isForm(r *http.Request) bool {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && ct == "application/x-www-form-urlencoded"
}

func (s *Server) serveCommand(w http.ResponseWriter, r *http.Request) {
	if !isForm(r) {
		s.rejectRequest(w, r, malformed("content type"))
		return
	}
	sc, err := slack.SlashCommandParse(r)
	if err != nil {
		s.rejectRequest(w, r, malformed("form"))
		return
	}
	o, err := originFromCommand(TransportHTTP, sc, s.o.responder.Allowed)
	if err != nil {
		s.rejectRequest(w, r, err)
		return
	}
	s.m.accepted.WithLabelValues("commands").Inc()
	writeReply(w, answerCommand(s.d, o, sc.Text))
}

// answerCommand parses text and runs it; usage errors are answered here,
// privately, without bothering the handler.
func answerCommand(d *dispatcher, o Origin, text string) Reply {
	cmd, err := Parse(text)
	if err != nil {
		var ue *UsageError
		if !errors.As(err, &ue) {
			ue = &UsageError{Usage: Prefix + " help", Hint: "invalid input"}
		}
		name := ue.Command
		if name == "" {
			name = "unknown"
		}
		d.m.handled.WithLabelValues(string(o.Transport), "command", name, outcomeUsageError).Inc()
		return usageReply(ue)
	}
	return d.command(Request{Origin: o, Command: cmd})
}

func (s *Server) serveAction(w http.ResponseWriter, r *http.Request) {
	if !isForm(r) {
		s.rejectRequest(w, r, malformed("content type"))
		return
	}
	if err := r.ParseForm(); err != nil {
		s.rejectRequest(w, r, malformed("form"))
		return
	}
	payload := r.PostForm.Get("payload")
	if payload == "" {
		s.rejectRequest(w, r, malformed("no payload"))
		return
	}
	var ic slack.InteractionCallback
	if err := json.Unmarshal([]byte(payload), &ic); err != nil {
		s.rejectRequest(w, r, malformed("payload is not an interaction"))
		return
	}
	req, err := actionFromCallback(TransportHTTP, &ic, s.o.responder.Allowed)
	if err != nil {
		s.rejectRequest(w, r, err)
		return
	}
	s.m.accepted.WithLabelValues("actions").Inc()
	s.d.action(req)
	w.WriteHeader(http.StatusOK)
}

// writeReply answers a slash command: the reply as JSON, or an empty 200
// for a zero reply (Slack then shows nothing).
func writeReply(w http.ResponseWriter, r Reply) {
	if r.IsZero() {
		w.WriteHeader(http.StatusOK)
		return
	}
	body, err := json.Marshal(r.wire())
	if err != nil {
		body, _ = json.Marshal(Reply{Text: "Internal error: the reply could not be encoded."}.wire())
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(body)
}
