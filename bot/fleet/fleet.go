// Package fleet is the command plane of a partitioned bot (issue 30,
// docs/capacity.md "partition"): P bot groups, each holding the hosted
// clusters of its management clusters (partition.Set), answer each
// other's /hcp commands.
//
// Every replica of group k runs a Server on wire.Subject(P, k) (core NATS
// request/reply; every replica answers, no queue group: a rogue
// subscriber in a queue group could swallow requests). A Client is a
// command.Correlator over all P groups: what names a cluster (its
// diagnoses, verdicts, HostedCluster, why it is not watched) is asked of
// the group that holds it; what is fleet-wide (the clusters, incidents,
// storms, `status`, the digest's cluster states) is gathered from every
// group and merged in the order one bot gives; an incident's timeline is
// asked of all, and the group that knows it answers. The replica's own
// group answers in-process, without a round trip.
//
// # Trust
//
// An answer is what a command shows as a diagnosis, an incident or a
// fix: whoever holds the bot's NATS credentials (not its signing key) can
// subscribe to a group's subject and answer, or relay answers. So every
// answer is sealed with the bot's signing key under its own context
// (approval.Signer.ForFleet, package wire): bound to the request's bytes
// (its random nonce, operation and arguments), to the answering group
// (index and count) and to the whole answer. The client believes no field
// before the seal verifies with the bot's key or one of
// approvals.trustedKeys, takes the first valid answer per group and
// ignores the others (logged). A group without a valid answer in time is
// named in the reply (command.FleetView.Missing): never a silent partial
// answer.
//
// # Bounds
//
// A call's deadline is the command's context, at most Timeout. One call
// is one fan-out: a request published once per group asked, the answers
// collected on one subscription of the caller's. Answers are gob, gzip
// compressed, cut into chunks within the server's max_payload (wire.Seal);
// a client takes at most MaxAnswer bytes per answer (all the answers it
// holds for a group together, counted before anything is allocated). A
// server answers at most Concurrency requests at once, keeps at most
// Backlog more waiting, each at most MaxWait, and drops the others (a
// flood from the bot's credentials costs it that many encodings at a
// time, not memory without bound; a burst of commands waits instead of
// missing a group), and refuses requests larger than maxRequest or with
// a reply subject outside wire.AnswerPrefix.
package fleet

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

// Local is what a group answers from: its own correlator. *bot.Bot
// implements it.
type Local interface {
	command.Correlator
	ClusterStates() []bot.ClusterState
}

var _ Local = (*bot.Bot)(nil)

// Operations a request asks for.
const (
	opClusters  = "clusters"  // Clusters
	opCluster   = "cluster"   // Diagnose, Explain, Unwatched, HostedCluster of Key
	opIncidents = "incidents" // Incidents and Storms
	opTimeline  = "timeline"  // Timeline and EventSteps of Incident
	opStatus    = "status"    // command.StatusOf(Ref)
	opStates    = "states"    // ClusterStates
)

// request is what a client asks; JSON on the wire. Nonce makes every
// request's bytes, and so the answers bound to them, unique.
type request struct {
	Nonce    string              `json:"nonce"`
	Op       string              `json:"op"`
	Key      *diagnose.Key       `json:"key,omitempty"`
	Incident string              `json:"incident,omitempty"`
	Ref      *chatops.ClusterRef `json:"ref,omitempty"`
}

// maxRequest bounds a request's bytes: a cluster reference and a nonce.
const maxRequest = 4 << 10

func newRequest(op string) (request, error) {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return request{}, fmt.Errorf("fleet: nonce: %w", err)
	}
	return request{Nonce: hex.EncodeToString(n[:]), Op: op}, nil
}

func marshalRequest(r request) ([]byte, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("fleet: request: %w", err)
	}
	return data, nil
}

func decodeRequest(data []byte) (request, error) {
	var r request
	if len(data) > maxRequest {
		return r, fmt.Errorf("fleet: request of %d bytes", len(data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("fleet: request: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		// One request is one JSON object: bytes after it would be
		// sealed into the answer's binding unread.
		return r, errors.New("fleet: request: bytes after the request")
	}
	if len(r.Nonce) < 32 {
		return r, errors.New("fleet: request without a nonce")
	}
	return r, nil
}

// answer is a group's answer to one request; only the fields of the
// request's operation are set.
type answer struct {
	Clusters []diagnose.Key

	Known      bool // the cluster of opCluster, the incident of opTimeline
	Diagnoses  []diagnose.Diagnosis
	Verdicts   []diagnose.Verdict
	Explained  bool
	Unwatched  string
	NotWatched bool
	HC         event.HostedClusterState
	HasHC      bool
	Incidents  []bot.Incident
	Storms     []bot.StormState
	Incident   bot.Incident
	Steps      []bot.Step
	EventSteps []bot.Step
	Status     []command.StatusLine
	States     []bot.ClusterState
}

// answerFrom answers r from the local correlator.
func answerFrom(b Local, r request) (answer, error) {
	var a answer
	switch r.Op {
	case opClusters:
		a.Clusters = b.Clusters()
	case opCluster:
		if r.Key == nil {
			return a, errors.New("fleet: cluster request without a key")
		}
		a.Diagnoses, a.Known = b.Diagnose(*r.Key)
		a.Verdicts, a.Explained = b.Explain(*r.Key)
		a.Unwatched, a.NotWatched = b.Unwatched(*r.Key)
		a.HC, a.HasHC = b.HostedCluster(*r.Key)
	case opIncidents:
		a.Storms = b.Storms()
		a.Incidents = b.Incidents()
	case opTimeline:
		a.Incident, a.Steps, a.Known = b.Timeline(r.Incident)
		if a.Known {
			a.EventSteps = a.Incident.EventSteps()
		}
	case opStatus:
		a.Status = command.StatusOf(b, r.Ref)
	case opStates:
		a.States = b.ClusterStates()
	default:
		return a, fmt.Errorf("fleet: unknown operation %q", r.Op)
	}
	return a, nil
}

// encode is an answer as it travels: gob, gzip compressed (a thousand
// clusters' diagnoses repeat the same words).
func encode(a answer) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, fmt.Errorf("fleet: encode: %w", err)
	}
	if err := gob.NewEncoder(zw).Encode(a); err != nil {
		return nil, fmt.Errorf("fleet: encode: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("fleet: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// decode reads an answer whose seal verified, inflating at most limit
// bytes.
func decode(data []byte, limit int) (answer, error) {
	var a answer
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return a, fmt.Errorf("fleet: decode: %w", err)
	}
	lr := &io.LimitedReader{R: zr, N: int64(limit) + 1}
	if err := gob.NewDecoder(lr).Decode(&a); err != nil {
		return a, fmt.Errorf("fleet: decode: %w", err)
	}
	if lr.N <= 0 {
		return a, fmt.Errorf("fleet: decode: answer larger than %d bytes", limit)
	}
	return a, nil
}
