package slackrec

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// MethodConnectionsOpen is the Web API method Socket Mode clients start with.
const MethodConnectionsOpen = "apps.connections.open"

// socketPath is where apps.connections.open sends clients; the
// connection number follows.
const socketPath = "/socketmode/"

// pingEvery is how often the stand-in pings its clients, as Slack does:
// slack-go reconnects after 30 s without a ping.
const pingEvery = 5 * time.Second

// SocketConn is one Socket Mode connection a client opened on the
// recorder: Send delivers envelopes over it as Slack does, Ack reads the
// client's acknowledgements back.
type SocketConn struct {
	// Token is the app-level token apps.connections.open was called with.
	Token string
	ws    *websocket.Conn

	mu   sync.Mutex
	acks map[string][]json.RawMessage // by envelope id, in arrival order
}

// openSocket answers apps.connections.open: an app-level token (xapp-…)
// gets the ws:// URL of a new connection on this recorder.
func (r *Recorder) openSocket(w http.ResponseWriter, req *http.Request) {
	c := readCall(req)
	token, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	rep := fail(http.StatusOK, "invalid_auth")
	r.mu.Lock()
	if strings.HasPrefix(token, "xapp-") {
		r.socketsOpened = append(r.socketsOpened, token)
		u := "ws" + strings.TrimPrefix(r.APIURL(), "http") + strings.TrimPrefix(socketPath, "/") + strconv.Itoa(len(r.socketsOpened)-1)
		rep = ok(map[string]any{"url": u})
	}
	c.Status = rep.status
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(rep.status)
	_ = json.NewEncoder(w).Encode(rep.body)
}

// serveSocket runs one connection: hello, pings, and the acknowledgements
// read until the client or the recorder goes away.
func (r *Recorder) serveSocket(ws *websocket.Conn) {
	n, err := strconv.Atoi(strings.TrimPrefix(ws.Request().URL.Path, socketPath))
	r.mu.Lock()
	if err != nil || n < 0 || n >= len(r.socketsOpened) {
		r.mu.Unlock()
		return
	}
	c := &SocketConn{Token: r.socketsOpened[n], ws: ws, acks: map[string][]json.RawMessage{}}
	r.sockets = append(r.sockets, c)
	r.mu.Unlock()
	defer ws.Close()
	if err := websocket.JSON.Send(ws, map[string]any{"type": "hello", "num_connections": 1,
		"connection_info": map[string]any{"app_id": AppID}}); err != nil {
		return
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = pingCodec.Send(ws, nil)
			case <-r.done:
				ws.Close()
				return
			case <-stop:
				return
			}
		}
	}()
	for {
		var a struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if err := websocket.JSON.Receive(ws, &a); err != nil {
			return
		}
		c.mu.Lock()
		c.acks[a.EnvelopeID] = append(c.acks[a.EnvelopeID], a.Payload)
		c.mu.Unlock()
	}
}

// pingCodec sends a WebSocket PING frame.
var pingCodec = websocket.Codec{Marshal: func(any) ([]byte, byte, error) { return nil, websocket.PingFrame, nil }}

// Socket waits up to timeout for a Socket Mode connection opened with the
// app-level token and returns the newest one.
func (r *Recorder) Socket(tb testing.TB, token string, timeout time.Duration) *SocketConn {
	tb.Helper()
	var c *SocketConn
	r.WaitFor(tb, timeout, func(r *Recorder) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.sockets {
			if s.Token == token {
				c = s
			}
		}
		return c != nil
	})
	return c
}

// Send delivers one envelope as Slack does: typ is "slash_commands",
// "interactive" or "events_api"; payload (a slack.SlashCommand, a
// slack.InteractionCallback, ...) is sent as JSON. Slash commands accept a
// response payload in the acknowledgement, as Slack's do.
func (c *SocketConn) Send(typ, envelopeID string, payload any) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	return websocket.JSON.Send(c.ws, map[string]any{"type": typ, "envelope_id": envelopeID,
		"payload": json.RawMessage(p), "accepts_response_payload": typ == "slash_commands"})
}

// Acks returns the payloads of the acknowledgements of envelopeID so far
// (an empty acknowledgement has an empty payload).
func (c *SocketConn) Acks(envelopeID string) []json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]json.RawMessage(nil), c.acks[envelopeID]...)
}

// Ack waits up to timeout for the first acknowledgement of envelopeID and
// returns its payload.
func (c *SocketConn) Ack(tb testing.TB, envelopeID string, timeout time.Duration) json.RawMessage {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if acks := c.Acks(envelopeID); len(acks) > 0 {
			return acks[0]
		}
		if time.Now().After(deadline) {
			tb.Fatalf("slackrec: no acknowledgement of envelope %s within %v", envelopeID, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
