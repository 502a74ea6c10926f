package approval

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Attack on leaderKV (3d11fd6), its parsing: what the leader's answer
// may hold. A stand-in answers MSG.GET on a server without JetStream (so
// that it is the only responder). Only a value under the key asked for is
// a value; a deletion or purge is not found; anything else is an error
// that is not "not found" (the agent hands the request back on it, where
// not found refuses it), and a leader that never answers ends the read
// even under a context without a deadline, as the agent's is.
func TestAttackLeaderKVAnswers(t *testing.T) {
	srv := natstest.StartOptions(t, &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const bucket, key = "b", "a1"
	subject := "$KV." + bucket + "." + key
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	msg := func(subj, hdrs, data string) string {
		h := ""
		if hdrs != "" {
			h = fmt.Sprintf(`,"hdrs":%q`, b64(hdrs))
		}
		return fmt.Sprintf(`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":%q,"seq":7%s,"data":%q,"time":"2026-12-06T22:00:00Z"}}`, subj, h, b64(data))
	}
	apiErr := func(code, errCode int) string {
		return fmt.Sprintf(`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","error":{"code":%d,"err_code":%d,"description":"x"}}`, code, errCode)
	}
	var answer atomic.Pointer[string]
	sub, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.KV_"+bucket, func(m *nats.Msg) {
		if a := *answer.Load(); a != "silent" {
			_ = m.Respond([]byte(a))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	l := leaderKV{nc: nc, bucket: bucket}
	for _, c := range []struct {
		name, answer string
		value        string // a value read
		notFound     bool   // jetstream.ErrKeyNotFound
	}{
		{name: "value", answer: msg(subject, "", `{"v":1}`), value: `{"v":1}`},
		{name: "value with headers", answer: msg(subject, "NATS/1.0\r\nNats-TTL: 1h\r\n\r\n", `{"v":1}`), value: `{"v":1}`},
		{name: "deleted", answer: msg(subject, "NATS/1.0\r\nKV-Operation: DEL\r\n\r\n", ""), notFound: true},
		{name: "purged", answer: msg(subject, "NATS/1.0\r\nKV-Operation: PURGE\r\n\r\n", ""), notFound: true},
		{name: "no message (10037)", answer: apiErr(404, int(jetstream.JSErrCodeMessageNotFound)), notFound: true},
		{name: "stream not found", answer: apiErr(404, int(jetstream.JSErrCodeStreamNotFound))},
		{name: "cluster not available", answer: apiErr(503, 10008)},
		{name: "a 404 of another code", answer: apiErr(404, 10014)},
		{name: "malformed", answer: `{"message":`},
		{name: "not JSON", answer: "NATS/1.0 503\r\n\r\n"},
		{name: "empty", answer: ""},
		{name: "no message, no error", answer: `{"type":"io.nats.jetstream.api.v1.stream_msg_get_response"}`},
		{name: "null message", answer: `{"message":null}`},
		{name: "headers that do not decode", answer: msg(subject, "garbage", `{"v":1}`)},
		{name: "headers not base64", answer: fmt.Sprintf(`{"message":{"subject":%q,"seq":7,"hdrs":"!!","data":""}}`, subject)},
		{name: "another key's value", answer: msg("$KV."+bucket+".a2", "", `{"v":2}`)},
		{name: "another bucket's value", answer: msg("$KV.other."+key, "", `{"v":2}`)},
		{name: "a deletion of another key", answer: msg("$KV."+bucket+".a2", "NATS/1.0\r\nKV-Operation: DEL\r\n\r\n", "")},
		{name: "the leader silent", answer: "silent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			answer.Store(&c.answer)
			start := time.Now()
			done := make(chan struct{})
			var e jetstream.KeyValueEntry
			var gerr error
			go func() {
				defer close(done)
				// The agent's serving context: no deadline.
				e, gerr = l.Get(context.Background(), key)
			}()
			select {
			case <-done:
			case <-time.After(3 * leaderGetTimeout):
				t.Fatalf("Get still waiting after %s: the request would be held, never handed back", time.Since(start).Round(time.Second))
			}
			switch {
			case c.value != "":
				if gerr != nil || string(e.Value()) != c.value || e.Key() != key || e.Revision() != 7 {
					t.Errorf("Get = %v, %v; want %s at revision 7", e, gerr, c.value)
				}
			case c.notFound:
				if !errors.Is(gerr, jetstream.ErrKeyNotFound) {
					t.Errorf("Get = %v, %v; want not found", e, gerr)
				}
			case gerr == nil || errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
				t.Errorf("Get = %v, %v; want an error other than not found (handed back)", e, gerr)
			}
		})
	}
	// Nobody answers at all: an error at once, not not-found.
	_ = sub.Unsubscribe()
	if _, err := l.Get(context.Background(), key); err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("no responders: Get error %v, want an error other than not found", err)
	}
}
