package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

const (
	// Version is the major schema version this package writes and the
	// highest it reads. Additive changes (new optional fields, new types,
	// new enum values) do not change it; consumers ignore unknown fields.
	Version = 1

	// MaxSize is the largest encoded event [Encode] produces and [Decode]
	// accepts, far below the NATS default max payload of 1 MiB.
	MaxSize = 256 << 10
)

// Event is the envelope of every fact the agent publishes. See the package
// documentation for the meaning of each field and the ID rule.
type Event struct {
	Version int         `json:"v"`
	ID      string      `json:"id"`
	Type    Type        `json:"type"`
	Time    time.Time   `json:"time"`   // when the agent observed the fact, UTC
	Source  string      `json:"source"` // management cluster name
	Cluster *ClusterRef `json:"cluster,omitempty"`
	Object  ObjectRef   `json:"object"`
	// Snapshot is the run ID of the level-triggered resync this event was
	// published by, or empty for a fresh transition. It is a run ID rather
	// than a flag so that a consumer can match events to the SnapshotDone
	// closing their run, and so that a resync is never swallowed by
	// JetStream deduplication of an earlier copy of the same fact.
	Snapshot string          `json:"snapshot,omitempty"`
	Payload  json.RawMessage `json:"payload"`
}

// IsSnapshot reports whether e was published by a resync rather than on a
// fresh transition.
func (e Event) IsSnapshot() bool { return e.Snapshot != "" }

// ClusterRef names a HostedCluster by the namespace and name of its
// HostedCluster object in the management cluster.
type ClusterRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String returns "namespace/name".
func (c ClusterRef) String() string { return c.Namespace + "/" + c.Name }

// Validate checks that the reference can be routed: the namespace is a
// DNS-1123 label and the name a DNS-1123 subdomain.
func (c ClusterRef) Validate() error {
	if err := c.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func (c ClusterRef) check() error {
	if err := checkNamespace(c.Namespace); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := checkName(c.Name); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// ParseClusterRef parses "namespace/name" as written by ClusterRef.String.
func ParseClusterRef(s string) (ClusterRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return ClusterRef{}, fmt.Errorf("%w: cluster %q: want namespace/name", ErrInvalid, s)
	}
	c := ClusterRef{Namespace: ns, Name: name}
	if err := c.Validate(); err != nil {
		return ClusterRef{}, err
	}
	return c, nil
}

// ObjectRef identifies the Kubernetes object an event is about.
type ObjectRef struct {
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace,omitempty"` // empty for cluster-scoped objects
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Hosted is set when the object lives in the hosted cluster (nodes,
	// pods on hosted workers) rather than in the management cluster; an
	// action on it must go to the hosted cluster's API server.
	Hosted bool `json:"hosted,omitempty"`
}

// Validate checks that the reference identifies an object: a kind and a
// name or UID. Names are not checked further; they are data, not routing.
func (o ObjectRef) Validate() error {
	if err := o.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func (o ObjectRef) check() error {
	if o.Kind == "" {
		return errors.New("object: kind is empty")
	}
	if o.Name == "" && o.UID == "" {
		return errors.New("object: name and uid are both empty")
	}
	// Above the Kubernetes limits, so any real object fits, yet small
	// enough that the envelope never crowds out the payload.
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"kind", o.Kind, 253},
		{"namespace", o.Namespace, 253},
		{"name", o.Name, 512},
		{"uid", o.UID, maxToken},
		{"resourceVersion", o.ResourceVersion, maxToken},
	} {
		if len(f.value) > f.max {
			return fmt.Errorf("object: %s is %d bytes, limit %d", f.name, len(f.value), f.max)
		}
	}
	return nil
}

// Option adjusts an event built by [New].
type Option func(*options)

type options struct {
	snapshot string
	fresh    bool // the run is part of the ID
}

// WithSnapshot marks the event as part of the resync run with the given ID.
// The run ID must be unique per run and per source (e.g. the agent's pod
// name and start time) and at most 128 visible ASCII characters. It is not
// part of the event ID: a restated fact is deduplicated against an earlier
// publication of the same fact (see the package documentation).
func WithSnapshot(run string) Option {
	return func(o *options) { o.snapshot = run }
}

// WithRestatement marks the event as part of the resync run run, like
// WithSnapshot, and makes the run part of its ID, so the restated fact is
// put on the stream again even when an earlier copy is inside the
// duplicate window. Periodic and requested restatements use it: their point
// is a fresh copy of every current fact, so that the stream holds one
// younger than its max age (a bot started after the older copies aged out
// learns every cluster). A restatement on start or reconnect uses
// WithSnapshot instead, so that a new leader does not double the stream.
func WithRestatement(run string) Option {
	return func(o *options) { o.snapshot, o.fresh = run, true }
}

// New builds a version 1 event for payload p, observed at observed.
//
// The type is taken from the payload. The payload is stored with proxy
// credentials redacted and free text bounded, so callers pass raw values.
// transitionKey identifies the fact (see the package documentation); it is
// hashed into the ID and not stored. cluster is copied.
func New(source string, cluster *ClusterRef, obj ObjectRef, p Payload, transitionKey string, observed time.Time, opts ...Option) (Event, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if p == nil {
		return Event{}, fmt.Errorf("%w: payload is nil", ErrInvalid)
	}
	// A typed nil pointer satisfies Payload but cannot be dereferenced.
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return Event{}, fmt.Errorf("%w: payload is a nil %T", ErrInvalid, p)
	}
	if transitionKey == "" {
		return Event{}, fmt.Errorf("%w: transition key is empty", ErrInvalid)
	}
	raw, err := marshal(p.sanitized())
	if err != nil {
		return Event{}, fmt.Errorf("%w: payload: %w", ErrInvalid, err)
	}
	e := Event{
		Version:  Version,
		Type:     p.EventType(),
		Time:     observed.UTC(),
		Source:   source,
		Object:   obj,
		Snapshot: o.snapshot,
		Payload:  raw,
	}
	if cluster != nil {
		c := *cluster
		e.Cluster = &c
	}
	// Hash before validating so that the ID check below applies to the
	// real value; validation then covers every input at once.
	salt := ""
	if o.fresh {
		salt = o.snapshot
	}
	e.ID = computeID(e.Source, e.Cluster, e.Type, e.Object, transitionKey, salt)
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// NewSnapshotDone builds the event that closes resync run run of source for
// one scope: the management cluster (cluster nil) or one hosted cluster. The
// run is its transition key, so it is never deduplicated.
func NewSnapshotDone(source, run string, cluster *ClusterRef, p SnapshotDone, observed time.Time) (Event, error) {
	if p.Count < 0 {
		return Event{}, fmt.Errorf("%w: snapshot count %d is negative", ErrInvalid, p.Count)
	}
	if run == "" {
		return Event{}, fmt.Errorf("%w: snapshot run is empty", ErrInvalid)
	}
	p.Started = p.Started.UTC()
	obj := ObjectRef{Kind: SourceKind, Name: source}
	return New(source, cluster, obj, p, run, observed, WithSnapshot(run))
}

// SourceKind is the ObjectRef.Kind of events about a source as a whole,
// such as SnapshotDone.
const SourceKind = "ManagementCluster"

// Validate checks the envelope: everything [Encode] requires and [Decode]
// guarantees, apart from whether the type is known and the payload decodes.
func (e Event) Validate() error {
	if err := e.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func (e Event) check() error {
	if e.Version < 1 || e.Version > Version {
		return fmt.Errorf("version %d, want 1 to %d", e.Version, Version)
	}
	if err := checkToken("id", e.ID); err != nil {
		return err
	}
	if err := checkType(e.Type); err != nil {
		return err
	}
	if e.Time.IsZero() {
		return errors.New("time is zero")
	}
	// JSON (RFC 3339) cannot represent other years; such an event could
	// be decoded but never re-encoded.
	if y := e.Time.UTC().Year(); y < 1 || y > 9999 {
		return fmt.Errorf("time %v out of range", e.Time)
	}
	if err := checkSource(e.Source); err != nil {
		return err
	}
	if e.Cluster != nil {
		if err := e.Cluster.check(); err != nil {
			return err
		}
	}
	if err := e.Object.check(); err != nil {
		return err
	}
	if e.Snapshot != "" {
		if err := checkToken("snapshot", e.Snapshot); err != nil {
			return err
		}
	}
	if e.Type == TypeSnapshotDone && e.Snapshot == "" {
		return fmt.Errorf("%s needs a snapshot run", e.Type)
	}
	if !isJSONObject(e.Payload) {
		return errors.New("payload is not a JSON object")
	}
	return nil
}

// Encode validates e and returns its JSON encoding, at most MaxSize bytes.
func Encode(e Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	e.Time = e.Time.UTC()
	data, err := marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxSize)
	}
	return data, nil
}

// marshal encodes without HTML escaping, which only bloats log text and
// would make re-encoding a decoded payload change its bytes.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// isJSONObject reports whether raw starts like a JSON object; whether it is
// valid JSON is checked by the encoder and decoder.
func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}
