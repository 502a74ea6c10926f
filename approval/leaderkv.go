package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderKV is the agent's approval store: Get asks the bucket's stream
// leader ($JS.API.STREAM.MSG.GET), where jetstream's KeyValue.Get makes a
// direct get that any replica of a replicated bucket answers. A follower
// a moment behind the leader shows a proposal as it was before its
// approval, or not at all (direct gets do not read your writes:
// nats-io/nats.docs#815), and the request the bot sent once the approval
// was acknowledged would be dropped as premature or refused as unknown: an
// approved fix that never runs (cmd/hcpbot TestConfigFieldsAtRuntime
// timed out that way on a three-node cluster in CI). The leader
// acknowledged the approval only once it had stored it.
type leaderKV struct {
	jetstream.KeyValue // the rest; the agent only reads
	nc                 *nats.Conn
	bucket             string
}

// leaderGetTimeout bounds a read whose context has no deadline (the
// agent's serving context has none), as jetstream's own calls are bounded
// by its default API timeout: a request the leader never answers (an
// election under way, an API queue full, a publish the server refuses)
// must end, so that the request is handed back rather than held, in
// progress, with every one queued behind it.
const leaderGetTimeout = 5 * time.Second

// msgGetResponse is the JetStream API's answer to STREAM.MSG.GET.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject string    `json:"subject"`
		Seq     uint64    `json:"seq"`
		Header  []byte    `json:"hdrs,omitempty"`
		Data    []byte    `json:"data,omitempty"`
		Time    time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// Get implements jetstream.KeyValue from the stream leader.
func (l leaderKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderGetTimeout)
		defer cancel()
	}
	subject := "$KV." + l.bucket + "." + key
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	msg, err := l.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+l.bucket, req)
	if err != nil {
		return nil, fmt.Errorf("read %s from the leader of bucket %s: %w", key, l.bucket, err)
	}
	var resp msgGetResponse
	switch err := json.Unmarshal(msg.Data, &resp); {
	case err != nil:
		return nil, fmt.Errorf("read %s from the leader of bucket %s: %w", key, l.bucket, err)
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("read %s from the leader of bucket %s: %w", key, l.bucket, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("read %s from the leader of bucket %s: %w", key, l.bucket, jetstream.ErrInvalidJetStreamResponse)
	case resp.Message.Subject != subject:
		// Not the key asked for: no answer (handed back), never another
		// key's value under this one.
		return nil, fmt.Errorf("read %s from the leader of bucket %s: answered with subject %q: %w", key, l.bucket, truncate(resp.Message.Subject), jetstream.ErrInvalidJetStreamResponse)
	}
	m := resp.Message
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return nil, fmt.Errorf("read %s from the leader of bucket %s: %w", key, l.bucket, err)
		}
		// A delete or purge marker: the key holds nothing, which
		// KeyValue.Get reports as not found.
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return nil, jetstream.ErrKeyNotFound
		}
	}
	return leaderEntry{bucket: l.bucket, key: key, value: m.Data, rev: m.Seq, created: m.Time}, nil
}

// leaderEntry is a value read from the leader.
type leaderEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
}

var _ jetstream.KeyValueEntry = leaderEntry{}

func (e leaderEntry) Bucket() string                  { return e.bucket }
func (e leaderEntry) Key() string                     { return e.key }
func (e leaderEntry) Value() []byte                   { return e.value }
func (e leaderEntry) Revision() uint64                { return e.rev }
func (e leaderEntry) Created() time.Time              { return e.created }
func (e leaderEntry) Delta() uint64                   { return 0 }
func (e leaderEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
