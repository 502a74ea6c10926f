package event

import (
	"errors"
	"fmt"
	"strings"
)

// Stream and subject names. Event subjects have exactly six tokens:
//
//	hcpbot.events.<source>.<hcNamespace>.<hcName>.<type>
//
// with NoClusterToken as namespace and name for events that concern no
// hosted cluster, and '.' in names escaped as '~'.
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

// eventTokens is the number of tokens of an event subject.
const eventTokens = 6

// SubjectParts is a parsed event subject.
type SubjectParts struct {
	Source  string
	Cluster *ClusterRef // nil for management-level events
	Type    Type
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
// subjects. The subject is what NATS authorised the publisher for; the
// source in the body is only a claim, so a consumer checks one against
// the other.
func OnSourceSubject(subject, source string) bool {
	prefix := EventsSubjectPrefix + "." + escape(source) + "."
	return len(subject) > len(prefix) && subject[:len(prefix)] == prefix
}

// ParseSubject splits an event subject into its parts, undoing the
// escaping. It checks syntax only: whether the type is known is left to the
// caller (Type.Known).
func ParseSubject(subject string) (SubjectParts, error) {
	tokens := strings.Split(subject, ".")
	if len(tokens) != eventTokens || tokens[0]+"."+tokens[1] != EventsSubjectPrefix {
		return SubjectParts{}, fmt.Errorf("%w: %q: want %s.<source>.<namespace>.<name>.<type>", ErrInvalidSubject, subject, EventsSubjectPrefix)
	}
	for _, tok := range tokens {
		if err := checkSubjectToken(tok); err != nil {
			return SubjectParts{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
		}
	}
	p := SubjectParts{Source: unescape(tokens[2]), Type: Type(tokens[5])}
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
