// Package wire is the sealed framing of the bot groups' fleet answers
// (package bot/fleet): subjects, the signing context, and the chunks an
// answer travels in. It imports nothing of hcpbot but the leaf package
// seal, so package approval can hand out a signer for it
// (approval.Signer.ForFleet) without importing the bot.
//
// An answer is the bytes a group's replica produced for one request, cut
// into chunks that each fit NATS's max_payload. Every chunk is sealed by
// the bot's key under SigningContext, over a header that binds it to the
// request (the digest of the request's bytes: its nonce, operation and
// arguments), the group that answers (its index and the number of
// groups), the replica, the whole answer (its digest and chunk count) and
// the chunk's own bytes. So a chunk is believed only for the very request
// it answers and the group asked; chunks of two answers never combine;
// and nothing signed for a checkpoint, an audit record or an approval
// passes for one (their contexts differ), nor a chunk for them.
package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/hcpbot/hcpbot/seal"
)

// Subjects: a group's replicas answer on Subject(count, index), every one
// of them (no queue group: a rogue subscriber in a queue group would take
// requests from the genuine replicas); a client receives the chunks on a
// subject of its own under AnswerPrefix. The bot's NATS user may publish
// and subscribe under Filter; an agent's may do neither.
const (
	Filter       = "hcpbot.fleet.>"
	AnswerPrefix = "hcpbot.fleet.answer"
)

// Subject is the request subject of group index of count:
// hcpbot.fleet.<count>.<index>.
func Subject(count, index int) string {
	return "hcpbot.fleet." + strconv.Itoa(count) + "." + strconv.Itoa(index)
}

// SigningContext starts what a Signer signs: the chunk's header line
// follows it.
const SigningContext = "hcpbot-fleet-answer-v1\n"

// Signer seals chunks: the bot's key as approval.Signer.ForFleet hands it
// out, which signs only what starts with SigningContext.
type Signer = seal.Signer

// Errors of Open.
var (
	// ErrForged: the chunk is unsealed, its seal does not verify, or it is
	// bound to another request, group or answer than the one expected.
	ErrForged = errors.New("fleet answer: seal does not verify")
	// ErrUntrustedKey: sealed by a key not trusted here.
	ErrUntrustedKey = errors.New("fleet answer: sealed by a key that is not trusted")
)

// sentinels are Open's errors for what seal.Verify finds.
var sentinels = seal.Sentinels{Forged: ErrForged, UntrustedKey: ErrUntrustedKey}

// Chunk is one sealed part of an answer, as it travels: a JSON header
// line, then the part's bytes.
type Chunk struct {
	Header
	Data []byte `json:"-"`
}

// Header binds a chunk; Key and Sig are the seal over the rest.
type Header struct {
	Count   int    `json:"p"`   // the number of groups
	Group   int    `json:"g"`   // the group that answers
	Request string `json:"req"` // RequestDigest of the request answered
	Replica string `json:"rep"` // the replica that answers
	Answer  string `json:"ans"` // hex SHA-256 of the whole answer
	Index   int    `json:"i"`
	Total   int    `json:"n"`
	Sum     string `json:"sum"` // hex SHA-256 of Data
	Key     string `json:"key"`
	Sig     []byte `json:"sig"`
}

// signed is what the seal covers after SigningContext: every field but
// the seal, in a fixed text form (the JSON of the header is not what is
// signed, so its field order or spacing does not matter).
func (h Header) signed() []byte {
	return fmt.Appendf(nil, "%d %d %s %s %s %d %d %s\n", h.Count, h.Group, h.Request, h.Replica, h.Answer, h.Index, h.Total, h.Sum)
}

// RequestDigest names a request by its bytes.
func RequestDigest(request []byte) string {
	s := sha256.Sum256(request)
	return hex.EncodeToString(s[:])
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// headerRoom is what a chunk's header takes at most, out of max_payload:
// the JSON of the fields (two 64-digit digests, a replica id, a key, a
// 64-byte signature in base64) is under 500 bytes.
const headerRoom = 1024

// Seal cuts answer into sealed chunks of at most maxPayload bytes each,
// ready to publish (Marshal): count and group name the answering group,
// request is the request's bytes, replica this replica.
func Seal(signer Signer, count, group int, request []byte, replica string, answer []byte, maxPayload int) ([][]byte, error) {
	if maxPayload <= 2*headerRoom {
		return nil, fmt.Errorf("fleet answer: max payload %d leaves no room for a chunk", maxPayload)
	}
	part := maxPayload - headerRoom
	total := max(1, (len(answer)+part-1)/part)
	h := Header{Count: count, Group: group, Request: RequestDigest(request), Replica: replica, Answer: sum(answer), Total: total, Key: signer.PublicKey()}
	out := make([][]byte, 0, total)
	for i := range total {
		data := answer[min(i*part, len(answer)):min((i+1)*part, len(answer))]
		h.Index, h.Sum = i, sum(data)
		sig, err := seal.Sign(signer, SigningContext, h.signed())
		if err != nil {
			return nil, fmt.Errorf("fleet answer: seal: %w", err)
		}
		h.Sig = sig
		msg, err := Marshal(Chunk{Header: h, Data: data})
		if err != nil {
			return nil, err
		}
		out = append(out, msg)
	}
	return out, nil
}

// Marshal is a chunk as a message's data.
func Marshal(c Chunk) ([]byte, error) {
	head, err := json.Marshal(c.Header)
	if err != nil {
		return nil, fmt.Errorf("fleet answer: header: %w", err)
	}
	return append(append(head, '\n'), c.Data...), nil
}

// Open reads a message as a chunk and verifies it: sealed by one of
// trusted, answering the request whose digest is request, by a group of
// count (Chunk.Group, which the caller checks is one it asked). Nothing
// of a chunk that does not verify is to be believed.
func Open(msg []byte, trusted []string, count int, request string) (Chunk, error) {
	head, data, ok := bytes.Cut(msg, []byte{'\n'})
	if !ok {
		return Chunk{}, fmt.Errorf("%w: no header", ErrForged)
	}
	var h Header
	if err := json.Unmarshal(head, &h); err != nil {
		return Chunk{}, fmt.Errorf("%w: header: %w", ErrForged, err)
	}
	if err := seal.Verify(trusted, h.Key, SigningContext, h.signed(), h.Sig); err != nil {
		return Chunk{}, fmt.Errorf("%w: %w", sentinels.Of(err), err)
	}
	switch {
	case h.Count != count || h.Group < 0 || h.Group >= count:
		return Chunk{}, fmt.Errorf("%w: answer of group %d of %d, asked groups of %d", ErrForged, h.Group, h.Count, count)
	case h.Request != request:
		return Chunk{}, fmt.Errorf("%w: answer to another request", ErrForged)
	case h.Sum != sum(data):
		return Chunk{}, fmt.Errorf("%w: chunk bytes differ from the sealed ones", ErrForged)
	case h.Total < 1 || h.Index < 0 || h.Index >= h.Total:
		return Chunk{}, fmt.Errorf("%w: chunk %d of %d", ErrForged, h.Index, h.Total)
	}
	return Chunk{Header: h, Data: data}, nil
}

// Assembly collects the verified chunks of the answers to one request
// from one group, per answer (a group's replicas may answer differently:
// a follower lags), until one is whole.
//
// Max bounds what it holds of all the answers together, before anything
// is allocated for a chunk: the bytes, and the chunk slots (a sealed
// chunk's Total is only its sealer's word: a key in
// approvals.trustedKeys, an old one maybe, could otherwise claim 2^40
// chunks, or open answer after answer, and make the client allocate
// without bound).
type Assembly struct {
	answers map[string]*partial // by answer digest
	held    int                 // bytes of every answer held
	slots   int                 // chunk slots of every answer held
	// Max bounds the bytes held, all answers together; 0 means no bound.
	Max int
}

// partial is one answer's chunks so far.
type partial struct {
	parts [][]byte
	have  int
}

// MaxChunks is the most chunks an answer of max bytes travels in: every
// chunk but the last carries more than headerRoom bytes (Seal).
func MaxChunks(max int) int { return max/headerRoom + 1 }

// Add keeps c (verified by Open) and returns the whole answer once every
// chunk of c's answer is there and their bytes are the sealed answer's.
func (a *Assembly) Add(c Chunk) ([]byte, bool, error) {
	if a.answers == nil {
		a.answers = map[string]*partial{}
	}
	p := a.answers[c.Answer]
	if p == nil {
		if a.Max > 0 && a.slots+c.Total > MaxChunks(a.Max) {
			return nil, false, fmt.Errorf("fleet answer: %d chunks claimed beside %d held, more than %d bytes travel in", c.Total, a.slots, a.Max)
		}
		p = &partial{parts: make([][]byte, c.Total)}
		a.answers[c.Answer] = p
		a.slots += c.Total
	}
	if len(p.parts) != c.Total {
		return nil, false, fmt.Errorf("%w: chunk counts differ within one answer", ErrForged)
	}
	if p.parts[c.Index] != nil {
		return nil, false, nil // a second replica's copy of the same chunk
	}
	if a.Max > 0 && a.held+len(c.Data) > a.Max {
		return nil, false, fmt.Errorf("fleet answer: more than %d bytes", a.Max)
	}
	p.parts[c.Index] = c.Data
	p.have++
	a.held += len(c.Data)
	if p.have < c.Total {
		return nil, false, nil
	}
	whole := bytes.Join(p.parts, nil)
	a.drop(c.Answer)
	if sum(whole) != c.Answer {
		return nil, false, fmt.Errorf("%w: the chunks do not make the sealed answer", ErrForged)
	}
	return whole, true, nil
}

// drop forgets an answer and what it held.
func (a *Assembly) drop(answer string) {
	p := a.answers[answer]
	for _, d := range p.parts {
		a.held -= len(d)
	}
	a.slots -= len(p.parts)
	delete(a.answers, answer)
}
