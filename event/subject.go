package event

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Stream and subject names. Agents publish event subjects of six tokens:
//
//	hcpbot.events.<source>.<hcNamespace>.<hcName>.<type>
//
// with NoClusterToken as namespace and name for events that concern no
// hosted cluster, and '.' in names escaped as '~'. With P > 1 bot groups,
// NATS stores them with two more tokens, the partition tag <P>.<k>, added
// by an account subject mapping (package partition, Tag): the source
// stays the third token.
const (
	// StreamName is the JetStream stream holding all events.
	StreamName = "HCPBOT_EVENTS"
	// SubjectRoot is the first token of every subject of the product.
	SubjectRoot = "hcpbot"
	// EventsSubjectPrefix starts every event subject.
	EventsSubjectPrefix = SubjectRoot + ".events"
	// EventsStreamSubjects is the subject filter of StreamName.
	EventsStreamSubjects = EventsSubjectPrefix + ".>"

	// AuditFilter matches the audit records of every source; see
	// AuditSubject.
	AuditFilter = SubjectRoot + ".audit.*"
	// RestateSubject is where a bot asks, over core NATS (no stream), every
	// agent leader to restate its current state: a bot that starts after
	// events aged out of StreamName still learns every cluster. The body
	// is ignored; agents bound how often they answer.
	RestateSubject = SubjectRoot + ".restate"

	// NoClusterToken stands for the hosted cluster namespace and name of
	// events about the management cluster itself. It cannot clash with a
	// name: '_' is not allowed in DNS-1123 names.
	NoClusterToken = "_"
)

// escapeChar replaces '.', the NATS token separator, in names. It is not
// allowed in DNS-1123 names, so the escaping is reversible.
const escapeChar = "~"

// eventTokens is the number of tokens of an event subject as an agent
// publishes it; taggedTokens with the partition tag NATS adds.
const (
	eventTokens  = 6
	taggedTokens = eventTokens + 2
)

// Tag is the partition tag NATS's subject mapping adds to an event
// subject: group Index of Count. Both tokens are written so that a tag of
// an earlier Count (events stored before a repartition) is recognised as
// such and not read as a group of the current one. The zero Tag is an
// untagged subject.
type Tag struct{ Count, Index int }

// Tagged reports whether t is a tag (Count >= 2, 0 <= Index < Count).
func (t Tag) Tagged() bool { return t.Count >= 2 && t.Index >= 0 && t.Index < t.Count }

// TagSubject is subject, an untagged event subject, with tag t appended:
// what the mapping of package partition stores.
func TagSubject(subject string, t Tag) string {
	return subject + "." + strconv.Itoa(t.Count) + "." + strconv.Itoa(t.Index)
}

// SubjectParts is a parsed event subject.
type SubjectParts struct {
	Source  string
	Cluster *ClusterRef // nil for management-level events
	Type    Type
	Tag     Tag // the partition tag; zero when untagged
}

// Subject returns the subject e is published on. It checks the parts it
// uses; the type need not be known to this build, so a relay can republish
// events of newer types.
func Subject(e Event) (string, error) {
	if err := checkSource(e.Source); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if e.Cluster != nil {
		if err := e.Cluster.check(); err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if err := checkType(e.Type); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ns, name := NoClusterToken, NoClusterToken
	if e.Cluster != nil {
		ns, name = escape(e.Cluster.Namespace), escape(e.Cluster.Name)
	}
	return joinTokens(EventsSubjectPrefix, escape(e.Source), ns, name, string(e.Type)), nil
}

// SubjectFilter returns a consumer filter for event subjects. An empty
// source, cluster field or type matches any value, a nil cluster any
// cluster or none; NoClusterToken as both cluster fields matches only
// events without a cluster. For example SubjectFilter("", nil, TypeNode)
// is "hcpbot.events.*.*.*.node".
func SubjectFilter(source string, cluster *ClusterRef, t Type) (string, error) {
	src, ns, name, typ := "*", "*", "*", "*"
	if source != "" {
		if err := checkSource(source); err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		src = escape(source)
	}
	if cluster != nil {
		if (cluster.Namespace == NoClusterToken) != (cluster.Name == NoClusterToken) {
			return "", fmt.Errorf("%w: %s must stand for both cluster namespace and name", ErrInvalid, NoClusterToken)
		}
		switch cluster.Namespace {
		case "":
		case NoClusterToken:
			ns = NoClusterToken
		default:
			if err := checkNamespace(cluster.Namespace); err != nil {
				return "", fmt.Errorf("%w: cluster: %w", ErrInvalid, err)
			}
			ns = escape(cluster.Namespace)
		}
		switch cluster.Name {
		case "":
		case NoClusterToken:
			name = NoClusterToken
		default:
			if err := checkName(cluster.Name); err != nil {
				return "", fmt.Errorf("%w: cluster: %w", ErrInvalid, err)
			}
			name = escape(cluster.Name)
		}
	}
	if t != "" {
		if err := checkType(t); err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		typ = string(t)
	}
	return joinTokens(EventsSubjectPrefix, src, ns, name, typ), nil
}

// OnSourceSubject reports whether subject is one of source's event
// subjects, tagged or not. The subject is what NATS authorised the
// publisher for; the source in the body is only a claim, so a consumer
// checks one against the other.
func OnSourceSubject(subject, source string) bool {
	prefix := EventsSubjectPrefix + "." + escape(source) + "."
	return len(subject) > len(prefix) && subject[:len(prefix)] == prefix
}

// ParseSubject splits an event subject into its parts, undoing the
// escaping. It checks syntax only: whether the type is known is left to the
// caller (Type.Known).
//
// A tagged subject (two more tokens, <P>.<k>: Tag) is accepted; its tag is
// in SubjectParts.Tag.
func ParseSubject(subject string) (SubjectParts, error) {
	tokens := strings.Split(subject, ".")
	if (len(tokens) != eventTokens && len(tokens) != taggedTokens) || tokens[0]+"."+tokens[1] != EventsSubjectPrefix {
		return SubjectParts{}, fmt.Errorf("%w: %q: want %s.<source>.<namespace>.<name>.<type>[.<partitions>.<partition>]", ErrInvalidSubject, subject, EventsSubjectPrefix)
	}
	var tag Tag
	if len(tokens) == taggedTokens {
		var ok bool
		if tag, ok = parseTag(tokens[6], tokens[7]); !ok {
			return SubjectParts{}, fmt.Errorf("%w: %q: partition tag %s.%s: want <partitions>.<partition>, 0 <= partition < partitions", ErrInvalidSubject, subject, tokens[6], tokens[7])
		}
		tokens = tokens[:eventTokens]
	}
	for _, tok := range tokens {
		if err := checkSubjectToken(tok); err != nil {
			return SubjectParts{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
		}
	}
	p := SubjectParts{Source: unescape(tokens[2]), Type: Type(tokens[5]), Tag: tag}
	if err := checkSource(p.Source); err != nil {
		return SubjectParts{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	switch ns, name := tokens[3], tokens[4]; {
	case ns == NoClusterToken && name == NoClusterToken:
	case ns == NoClusterToken || name == NoClusterToken:
		return SubjectParts{}, fmt.Errorf("%w: %q: %s must stand for both cluster namespace and name", ErrInvalidSubject, subject, NoClusterToken)
	default:
		c := ClusterRef{Namespace: unescape(ns), Name: unescape(name)}
		if err := c.check(); err != nil {
			return SubjectParts{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
		}
		p.Cluster = &c
	}
	if err := checkType(p.Type); err != nil {
		return SubjectParts{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	return p, nil
}

// SubjectSource reads the source token (escaped, the third) and the
// partition tag of an event subject without allocating: what a consumer
// needs to skip another group's events before decoding them. ok is false
// for a subject that is not an event subject of six or eight tokens; the
// token is not checked (ParseSubject checks).
func SubjectSource(subject string) (tok string, tag Tag, ok bool) {
	rest, found := strings.CutPrefix(subject, EventsSubjectPrefix+".")
	if !found {
		return "", Tag{}, false
	}
	// rest: source, namespace, name, type, then the optional tag.
	var toks [taggedTokens - 2]string
	n := 0
	for n < len(toks) {
		t, after, more := strings.Cut(rest, ".")
		if t == "" {
			return "", Tag{}, false
		}
		toks[n], rest = t, after
		n++
		if !more {
			break
		}
		if n == len(toks) {
			return "", Tag{}, false // more tokens than a tagged subject
		}
	}
	switch n {
	case eventTokens - 2:
		return toks[0], Tag{}, true
	case taggedTokens - 2:
		if tag, ok = parseTag(toks[4], toks[5]); ok {
			return toks[0], tag, true
		}
	}
	return "", Tag{}, false
}

// parseTag reads the two tokens of a partition tag: decimal, no sign or
// leading zero, 2 <= count, 0 <= index < count.
func parseTag(count, index string) (Tag, bool) {
	c, err := strconv.Atoi(count)
	if err != nil || c < 2 || strconv.Itoa(c) != count {
		return Tag{}, false
	}
	i, err := strconv.Atoi(index)
	if err != nil || i < 0 || i >= c || strconv.Itoa(i) != index {
		return Tag{}, false
	}
	return Tag{Count: c, Index: i}, true
}

// AuditSubject carries the audit records about source:
// hcpbot.audit.<source>.
func AuditSubject(source string) (string, error) {
	return sourceSubject(source, "audit", "")
}

// AgentAuditFilter matches every agent's own audit records.
const AgentAuditFilter = SubjectRoot + ".audit.*.agent"

// AgentAuditSource returns the source whose agent wrote on subject, an
// AgentAuditSubject.
func AgentAuditSource(subject string) (string, bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != SubjectRoot || parts[1] != "audit" || parts[3] != "agent" {
		return "", false
	}
	source := unescape(parts[2])
	if checkSource(source) != nil {
		return "", false
	}
	return source, true
}

// AgentAuditSubject carries the audit records the agent of source writes
// itself (the action requests it refused): hcpbot.audit.<source>.agent.
// A subject of its own, so that the agent's NATS user may append there and
// nowhere else, and its records are never mistaken for the bot's.
func AgentAuditSubject(source string) (string, error) {
	return sourceSubject(source, "audit", "agent")
}

// IdentityCheckFilter matches the subjects on which a bot asks the agents
// whether an approver's Kubernetes identity may make a change.
const IdentityCheckFilter = SubjectRoot + ".identity.*.check"

// IdentityCheckSubject is where a bot asks the agent of source, over core
// NATS, whether an approver's identity may make a change (package
// approval): hcpbot.identity.<source>.check. The agent answers on the
// request's reply subject only (a response permission), so its user needs
// no right to publish into the bot's inbox.
func IdentityCheckSubject(source string) (string, error) {
	tok, err := SourceToken(source)
	if err != nil {
		return "", err
	}
	return SubjectRoot + ".identity." + tok + ".check", nil
}

// SourceToken is source as one subject token ('.' escaped), for the
// subjects other packages build per source (package actions' requests).
func SourceToken(source string) (string, error) {
	if err := checkSource(source); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return escape(source), nil
}

func sourceSubject(source, kind, suffix string) (string, error) {
	tok, err := SourceToken(source)
	if err != nil {
		return "", err
	}
	s := joinTokens(SubjectRoot, kind, tok)
	if suffix != "" {
		s += "." + suffix
	}
	return s, nil
}

// BotInboxPrefix starts the reply subjects of the bot's connections
// (nats.CustomInboxPrefix): the shipped NATS lets only the bot subscribe
// below it, so no agent can read the bot's replies.
const BotInboxPrefix = "_INBOX_bot"

// AgentInboxPrefix starts the reply subjects of the agent of source:
// _INBOX_agent_<source>, one token, so that a server permission on
// "_INBOX_agent_<source>.>" covers that agent's replies and no other's.
func AgentInboxPrefix(source string) (string, error) {
	if err := checkSource(source); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return "_INBOX_agent_" + escape(source), nil
}

// checkSubjectToken rejects what NATS would misread: empty tokens,
// wildcards and whitespace. Names checked as DNS-1123 never contain these;
// this guards the parser against foreign subjects.
func checkSubjectToken(tok string) error {
	if tok == "" {
		return errors.New("empty token")
	}
	if strings.ContainsAny(tok, "*> \t\r\n\f\v") {
		return fmt.Errorf("token %q contains a wildcard or whitespace", tok)
	}
	return nil
}

func escape(name string) string    { return strings.ReplaceAll(name, ".", escapeChar) }
func unescape(token string) string { return strings.ReplaceAll(token, escapeChar, ".") }

func joinTokens(tokens ...string) string { return strings.Join(tokens, ".") }
