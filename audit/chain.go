package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/internal/jitter"
	"github.com/hcpbot/hcpbot/seal"
)

// ChainVersion is the Chain field of every record Append writes; records
// without it were written before the trail was chained.
const ChainVersion = 1

// SigningContext starts what a Signer signs: the record's bytes follow
// it, so that no signature over an audit record can pass for one over
// anything else the key signs (approved action requests, proposal seals).
const SigningContext = "hcpbot-audit-v1\n"

// Signer signs the records a Log appends (WithSigner). The bot passes its
// action-signing key (approval.Signer.ForAudit), which signs only what
// starts with SigningContext.
type Signer = seal.Signer

// NewKeyPairSigner signs with kp, and only inputs that start with
// SigningContext.
func NewKeyPairSigner(kp nkeys.KeyPair) (Signer, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("audit: signing key: %w", err)
	}
	return seal.ForContext(kp, pub, SigningContext, "audit: refusing to sign something that is not an audit record"), nil
}

// NewSeedSigner signs with the key of an nkeys seed ("SU…", as `hcpbot
// keygen` writes: the approvals.signingKey).
func NewSeedSigner(seed []byte) (Signer, error) {
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		// nkeys never quotes the seed in its errors, but say less anyway.
		return nil, errors.New("audit: signing key: not an nkeys seed")
	}
	return NewKeyPairSigner(kp)
}

// digest is the hex SHA-256 of a message's exact bytes: what the next
// record on the subject names as PrevDigest.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// sigField is how the signature starts in an encoded record. Sig is the
// last field of Record, so a signed record is its signed bytes with this
// field spliced in before the closing brace; inside a JSON string a quote
// is always escaped, so the last occurrence is the field itself.
const sigField = `,"sig":"`

// encode renders r as stored, signed when the Log has a signer: the
// signature covers every other field, chain fields included.
func (l *Log) encode(r Record) ([]byte, error) {
	r.Key, r.Sig = "", nil
	if l.signer != nil {
		r.Key = l.signer.PublicKey()
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("audit: encode record %s: %w", r.ID, err)
	}
	if l.signer == nil {
		return body, nil
	}
	if r.Sig, err = seal.Sign(l.signer, SigningContext, body); err != nil {
		return nil, fmt.Errorf("audit: sign record %s: %w", r.ID, err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("audit: encode record %s: %w", r.ID, err)
	}
	return data, nil
}

// signedPart splits a stored record into the bytes its signature covers
// after SigningContext and the signature; ok is false when it carries no signature field.
func signedPart(data []byte) (signed, sig []byte, ok bool) {
	i := bytes.LastIndex(data, []byte(sigField))
	if i < 0 || !bytes.HasSuffix(data, []byte(`"}`)) || i+len(sigField) > len(data)-2 {
		return nil, nil, false
	}
	sig, err := base64.StdEncoding.DecodeString(string(data[i+len(sigField) : len(data)-2]))
	if err != nil {
		return nil, nil, false
	}
	return append(data[:i:i], '}'), sig, true
}

// head is what this Log knows of the last message on one subject. Its
// mutex serialises the Log's appends there, so that they never race each
// other for the same predecessor; other writers (bot replicas) are kept
// in line by the server's expected-sequence check.
type head struct {
	mu     sync.Mutex
	known  bool
	seq    uint64 // 0: the subject holds no message
	digest string
}

func (l *Log) head(subject string) *head {
	l.headsMu.Lock()
	defer l.headsMu.Unlock()
	h, ok := l.heads[subject]
	if !ok {
		h = &head{}
		l.heads[subject] = h
	}
	return h
}

// Retries of an append that lost the race for its predecessor: bounded,
// with jitter so that two replicas that collided do not collide again.
const (
	appendAttempts    = 10
	appendBackoffBase = 10 * time.Millisecond
	appendBackoffMax  = time.Second
)

// appendChained publishes r on subject as the successor of the subject's
// last message. A retried append (same ID) within the duplicate window is
// answered as a duplicate by the server whatever the subject's last
// message has become since (TestAuditAppendRetryAfterChainMoved), so it never
// lands twice. A duplicate ack is believed only when it points at this
// record on this subject (TestAuditIDOnAnotherSubjectDoesNotPreempt).
func (l *Log) appendChained(ctx context.Context, subject string, r Record) error {
	h := l.head(subject)
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Chain = ChainVersion
	id := msgID(subject, r.ID)
	for attempt := 1; ; attempt++ {
		if !h.known {
			seq, dig, err := l.lastOn(ctx, subject)
			if err != nil {
				return fmt.Errorf("audit: append record %s: read the last record of %s: %w", r.ID, subject, err)
			}
			h.known, h.seq, h.digest = true, seq, dig
		}
		r.PrevSeq, r.PrevDigest = h.seq, h.digest
		data, err := l.encode(r)
		if err != nil {
			return err
		}
		// The expected stream guards against another stream capturing the
		// subject, where the record would not enjoy the append-only settings.
		ack, err := l.js.Publish(ctx, subject, data, jetstream.WithMsgID(id), jetstream.WithExpectStream(StreamName),
			jetstream.WithExpectLastSequencePerSubject(h.seq))
		if err == nil && ack.Duplicate {
			mine, oerr := l.ours(ctx, ack.Sequence, subject, r.ID)
			switch {
			case oerr != nil:
				h.known = false
				return fmt.Errorf("audit: append record %s: read the record its id names: %w", r.ID, oerr)
			case mine:
				// Landed before, under whatever predecessor it named then;
				// what follows it now is unknown here.
				h.known = false
				return nil
			}
			// Pre-empted: appended under a message id nobody can guess.
			id = msgID(subject, r.ID) + "." + NewID()
			continue
		}
		switch {
		case err == nil:
			h.seq, h.digest = ack.Sequence, digest(data)
			return nil
		}
		// A timeout may have landed the record: either way the head is
		// no longer known.
		h.known = false
		if !isWrongLastSeq(err) || attempt == appendAttempts {
			return fmt.Errorf("audit: append record %s (attempt %d): %w", r.ID, attempt, err)
		}
		t := time.NewTimer(jitter.Backoff(attempt, appendBackoffBase, appendBackoffMax))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("audit: append record %s: %w", r.ID, errors.Join(err, ctx.Err()))
		case <-t.C:
		}
	}
}

// msgID is the message id a record is de-duplicated by: the stream
// de-duplicates across every subject, so it names the subject too.
func msgID(subject, id string) string { return subject + ":" + id }

// isWrongLastSeq: another writer appended on the subject since its last
// message was read. Replicated streams answer 10164 instead of 10071.
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// msgGetSubject is the API the last message of a subject is read with
// ($JS.API.STREAM.MSG.GET, the only read of the stream the agent's NATS
// user is granted). bus connects with the default API prefix.
const msgGetSubject = jetstream.DefaultAPIPrefix + "STREAM.MSG.GET." + StreamName

// lastReadTimeout bounds reading the last message. A NATS user not
// allowed to publish there gets no answer at all, only the wait.
const lastReadTimeout = 5 * time.Second

// lastOn returns the sequence and digest of the last message on subject;
// 0 and "" when it holds none. It is jetstream.Stream's
// GetLastMsgForSubject without the stream info that obtaining a Stream
// costs (and that the agent may not read).
func (l *Log) lastOn(ctx context.Context, subject string) (uint64, string, error) {
	m, err := l.msgGet(ctx, struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	switch {
	case err != nil:
		return 0, "", err
	case m == nil:
		return 0, "", nil
	case m.Subject != subject || m.Seq == 0:
		return 0, "", fmt.Errorf("unexpected %s answer", msgGetSubject)
	}
	return m.Seq, digest(m.Data), nil
}

// stored is a message as $JS.API.STREAM.MSG.GET returns it.
type stored struct {
	Subject string `json:"subject"`
	Seq     uint64 `json:"seq"`
	Data    []byte `json:"data"`
}

// msgGet asks the stream for one message; nil when there is none.
func (l *Log) msgGet(ctx context.Context, request any) (*stored, error) {
	ctx, cancel := context.WithTimeout(ctx, lastReadTimeout)
	defer cancel()
	req, err := json.Marshal(request)
	if err != nil {
		return nil, err
	}
	msg, err := l.js.Conn().RequestWithContext(ctx, msgGetSubject, req)
	if err != nil {
		return nil, fmt.Errorf("no answer on %s (may this NATS user publish there?): %w", msgGetSubject, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *stored             `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("decode %s answer: %w", msgGetSubject, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, resp.Error
	}
	return resp.Message, nil
}

// ours reports whether the message stored at seq is record id on
// subject: what a duplicate ack must point at for the append to have
// landed. Anyone who may publish on an audit subject can store a message
// under a record's message id first (ids are predictable); the genuine
// record is then appended under a message id of its own.
func (l *Log) ours(ctx context.Context, seq uint64, subject, id string) (bool, error) {
	m, err := l.msgGet(ctx, struct {
		Seq uint64 `json:"seq"`
	}{seq})
	if err != nil || m == nil {
		return false, err
	}
	var r struct {
		ID string `json:"id"`
	}
	return m.Subject == subject && json.Unmarshal(m.Data, &r) == nil && r.ID == id, nil
}
