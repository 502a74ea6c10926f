package chatops

import (
	"strconv"
	"strings"
	"time"
)

// Command is one parsed /hcp command. The set is closed (the unexported
// method), so a handler's type switch over the structs below is exhaustive.
//
// String renders the command in the grammar Parse reads, without the
// leading "/hcp": Parse(c.String()) returns a command equal to c.
type Command interface {
	// Name is the command's name as in Usage: "status", "fix noproxy", ...
	Name() string
	String() string
	command()
}

// ShowHelp asks for the command list, or the usage of Topic (a command name's
// first word, e.g. "fix").
type ShowHelp struct{ Topic string }

// Status asks for the state of one cluster, of one management cluster's
// (Mgmt, typed "mgmt-1:"), or of all when both are empty.
type Status struct {
	Cluster *ClusterRef
	Mgmt    string
}

// Incidents lists the open incidents.
type Incidents struct{}

// Diagnose runs the diagnosis of a cluster now.
// Exactly one of Cluster and IncidentID is set (an incident's cluster).
type Diagnose struct {
	Cluster    ClusterRef
	IncidentID string
}

// FixNoProxy proposes the noProxy fix for a cluster, with extra entries the
// user wants added (canonical, see ParseNoProxyEntry; nil if none).
type FixNoProxy struct {
	Cluster ClusterRef
	Add     []string
}

// Expose publishes a Service of the hosted cluster through NodePorts on the
// management cluster. Ports restricts the Service ports (nil: all).
// NodePorts chooses node ports, in order: for Ports when given (at most one
// each), else for the Service's ports; whether they fit the node-port range
// and are free is the action's business (checked before any write).
type Expose struct {
	Cluster   ClusterRef
	Namespace string // DNS-1123 label
	Service   string // DNS-1035 label, as Service names are
	Ports     []int32
	NodePorts []int32
}

// Rollback undoes an applied action.
type Rollback struct{ ActionID string }

// Approve approves a proposed action.
type Approve struct{ ActionID string }

// Reject rejects a proposed action. Reason is user text: control and format
// characters removed, at most MaxReasonRunes, not escaped for Slack.
type Reject struct{ ActionID, Reason string }

// Silence mutes notifications for a cluster or for one incident; exactly
// one of Cluster and IncidentID is set. Reason is as in Reject.
type Silence struct {
	Cluster    *ClusterRef
	IncidentID string
	Duration   time.Duration
	Reason     string
}

// Timeline shows an incident's timeline.
type Timeline struct{ IncidentID string }

// Audit shows the last N audit entries; 0 leaves the count to the handler.
type Audit struct{ N int }

// AuditVerify checks the whole audit trail: every record's link to its
// predecessor and the bot's signatures.
type AuditVerify struct{}

// DigestNow posts the digest immediately.
type DigestNow struct{}

// Whoami shows the asking person their Kubernetes identity on each
// management cluster: who the agent acts as when they approve a change.
type Whoami struct{}

// NoProxyCheck explains whether traffic from a cluster to Host:Port goes
// through the proxy. Port 0 means none was given.
type NoProxyCheck struct {
	Cluster ClusterRef
	Host    string // lower-case hostname or canonical IP literal
	Port    int32
}

func (ShowHelp) Name() string     { return "help" }
func (Status) Name() string       { return "status" }
func (Incidents) Name() string    { return "incidents" }
func (Diagnose) Name() string     { return "diagnose" }
func (FixNoProxy) Name() string   { return "fix noproxy" }
func (Expose) Name() string       { return "expose" }
func (Rollback) Name() string     { return "rollback" }
func (Approve) Name() string      { return "approve" }
func (Reject) Name() string       { return "reject" }
func (Silence) Name() string      { return "silence" }
func (Audit) Name() string        { return "audit" }
func (AuditVerify) Name() string  { return "audit " + auditVerifyWord }
func (Timeline) Name() string     { return "timeline" }
func (DigestNow) Name() string    { return "digest now" }
func (NoProxyCheck) Name() string { return "noproxy check" }
func (Whoami) Name() string       { return "whoami" }

func (ShowHelp) command()     {}
func (Status) command()       {}
func (Incidents) command()    {}
func (Diagnose) command()     {}
func (FixNoProxy) command()   {}
func (Expose) command()       {}
func (Rollback) command()     {}
func (Approve) command()      {}
func (Reject) command()       {}
func (Silence) command()      {}
func (Audit) command()        {}
func (AuditVerify) command()  {}
func (Timeline) command()     {}
func (DigestNow) command()    {}
func (NoProxyCheck) command() {}
func (Whoami) command()       {}

func (c ShowHelp) String() string { return join("help", c.Topic) }
func (c Status) String() string {
	if c.Cluster == nil {
		if c.Mgmt != "" {
			return "status " + c.Mgmt + ":"
		}
		return "status"
	}
	return "status " + c.Cluster.String()
}
func (Incidents) String() string { return "incidents" }
func (c Diagnose) String() string {
	if c.IncidentID != "" {
		return "diagnose " + c.IncidentID
	}
	return "diagnose " + c.Cluster.String()
}
func (c FixNoProxy) String() string {
	s := "fix noproxy " + c.Cluster.String()
	if len(c.Add) > 0 {
		s += " --add " + strings.Join(c.Add, ",")
	}
	return s
}
func (c Expose) String() string {
	s := "expose " + c.Cluster.String() + " " + c.Namespace + "/" + c.Service
	if len(c.Ports) > 0 {
		s += " " + joinPorts(c.Ports)
	}
	if len(c.NodePorts) > 0 {
		s += " " + nodePortsWord + " " + joinPorts(c.NodePorts)
	}
	return s
}

func joinPorts(ports []int32) string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(int(p))
	}
	return strings.Join(ps, ",")
}
func (c Rollback) String() string { return "rollback " + c.ActionID }
func (c Approve) String() string  { return "approve " + c.ActionID }
func (c Reject) String() string   { return join("reject "+c.ActionID, c.Reason) }
func (c Silence) String() string {
	target := c.IncidentID
	if c.Cluster != nil {
		target = c.Cluster.String()
	}
	return join("silence "+target+" "+formatDuration(c.Duration), c.Reason)
}
func (c Timeline) String() string { return "timeline " + c.IncidentID }
func (c Audit) String() string {
	if c.N == 0 {
		return "audit"
	}
	return "audit " + strconv.Itoa(c.N)
}
func (c AuditVerify) String() string { return c.Name() }
func (DigestNow) String() string     { return "digest now" }
func (Whoami) String() string        { return "whoami" }
func (c NoProxyCheck) String() string {
	return "noproxy check " + c.Cluster.String() + " " + joinHostPort(c.Host, c.Port)
}

func join(s, rest string) string {
	if rest == "" {
		return s
	}
	return s + " " + rest
}
