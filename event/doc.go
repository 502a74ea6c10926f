// Package event is the contract between the hcpbot agent, which watches
// management clusters and publishes what it observes, and the bot, which
// consumes, correlates and diagnoses. Both sides depend on this package
// only, so it is kept small and changes to it are additive.
//
// # Envelope
//
// Every message on the events stream is one JSON object, an [Event]:
//
//	{
//	  "v": 1,                          // major schema version
//	  "id": "3f1c…",                   // deterministic, also the Nats-Msg-Id header
//	  "type": "crashloop",             // one of the types below
//	  "time": "2026-07-22T10:00:00Z",  // when the agent observed the fact, UTC
//	  "source": "mgmt-east",           // management cluster name
//	  "cluster": {"namespace": "clusters", "name": "example"}, // hosted cluster, if any
//	  "object": {"kind": "Pod", "namespace": "…", "name": "…", "uid": "…",
//	             "resourceVersion": "…", "hosted": true},
//	  "snapshot": "agent-7f9c@2026-07-22T09:59:00Z", // resync run, if any
//	  "payload": { … }                 // the type's payload struct
//	}
//
// "v" is the major version. Additive changes (new optional fields, new
// types, new enum values such as a new [Signature]) keep v at 1; consumers
// ignore unknown fields, so such changes never break them. Only a change a
// v1 consumer would misread raises v, and [Decode] rejects such events with
// [ErrUnsupportedVersion].
//
// "object.hosted" is set when the object lives in the hosted cluster (its
// nodes, the pods on its workers) rather than in the management cluster.
//
// Proxy URLs are stored with their userinfo replaced by "***", and
// free-text fields (condition messages, termination messages, errors, log
// excerpts) have URL credentials redacted and are cut to 4 KiB. [New] does
// this, so producers pass raw values; [Event.DecodePayload] applies it
// again, so consumers never see credentials from an older producer either.
//
// # Types
//
// Each type is one lower-case word and has one payload struct:
//
//	hostedcluster   HostedClusterState  platform, infraID, version, proxy, trusted CA summary, networks, API endpoints, conditions
//	proxychange     ProxyChange         old and new proxy spec of a HostedCluster or Proxy/cluster, noProxy diff
//	nodepool        NodePoolState       replicas and conditions
//	node            NodeReadiness       Ready condition, providerID, internal IP of a hosted node
//	crashloop       PodCrashLoop        restarts, last termination, Signature; Cleared on recovery
//	apiserverproxy  KubeAPIServerProxy  kube-apiserver-proxy mode (haproxy/tunnel) and CONNECT failures
//	virtlauncher    VirtLauncher        the KubeVirt VM pod behind a hosted node
//	reachability    Reachability        whether the agent reaches the hosted API server, or (Unwatched) why it does not watch it
//	ocpproxy        OpenShiftProxy      Proxy/cluster spec and status of a standalone OpenShift
//	snapshotdone    SnapshotDone        end of a resync snapshot of one source
//	nodesummary     NodeSummary         a hosted cluster's node population: total, Ready, NotReady, Unknown, joining, not joining, cordoned
//	apiservice      APIServiceState     an aggregated APIService of a hosted cluster that is not Available (or recovered)
//	connectivity    ConnectivityCheck   the hosted cluster's control-plane-connectivity-check record: last success, stale or not
//
// A consumer that meets a type it does not know gets [ErrUnknownType] from
// [Decode] together with the envelope, and should dead-letter the message
// (a newer consumer may handle it) rather than fail.
//
// # Subjects
//
// Events are published to the stream [StreamName] ("HCPBOT_EVENTS") on
//
//	hcpbot.events.<source>.<hcNamespace>.<hcName>.<type>
//
// Events about the management cluster itself (ocpproxy, snapshotdone) use
// "_" ([NoClusterToken]) for both namespace and name. Kubernetes names may
// contain '.', the NATS token separator, so every '.' in a source or name
// is written as '~', which DNS-1123 names cannot contain; [ParseSubject]
// reverses it. Sources, namespaces and names are validated as DNS-1123
// subdomains (namespaces as labels), so no token is empty or holds a
// wildcard or whitespace. [SubjectFilter] builds consumer filters with '*'
// for the parts left open.
//
// Audit records, whose payloads are defined elsewhere, use
// hcpbot.audit.<source> (AuditSubject). Action requests travel on
// hcpbot.actions.<source>.request: package actions owns that protocol
// (actions.RequestSubject) and builds the subject from SourceToken.
//
// # IDs and deduplication
//
// The ID is the first 32 hex digits of a sha256 over what identifies the
// fact: the source, the hosted cluster, the type, the object's UID (or,
// without a UID, its kind, namespace, name and whether it is hosted), the
// transition key. It does not depend on the observation time, the agent
// instance, the snapshot run or the payload. Precisely, the hash input is
// the strings
//
//	"hcpbot/event/id/v1", source, cluster namespace, cluster name, type,
//	"uid", uid  |  "ref", "hosted"|"management", kind, namespace, name,
//	transition key, "" (the run of a [WithRestatement] event; formerly the
//	snapshot run of every snapshot event, kept so IDs stay stable)
//
// each preceded by its byte length as an unsigned varint, absent values
// being empty strings.
//
// The agent sets the ID as the Nats-Msg-Id header, so JetStream drops copies
// of the same fact published within the stream's duplicate window, whether
// by a restarted agent or by a second agent watching the same management
// cluster.
//
// The transition key is what makes a fact distinct from the previous one
// about the same object. Callers must derive it from the object as stored in
// the API server, not from local state or the clock, so that every agent
// computes the same key; and it must change whenever the fact changes, or
// the new fact is dropped as a duplicate. Use:
//
//	nodepool, virtlauncher, ocpproxy, apiserverproxy
//	                "rv:" + the object's metadata.resourceVersion
//	hostedcluster   "rv:" + its resourceVersion; when its proxy names a
//	                trusted CA ConfigMap, followed by ";trustedCA:rv:" +
//	                the ConfigMap's resourceVersion (";trustedCA:absent"
//	                while it does not exist): a renewed bundle is news
//	                although the HostedCluster did not change
//	proxychange     "rv:" + the resourceVersion of the object carrying the new spec
//	node            TransitionAt("Ready=<status>", lastTransitionTime), or
//	                TransitionAt("NotJoining", creationTimestamp)
//	crashloop       "crashloop:<container>:<signature>:<restartCount>", or
//	                "cleared:<pod uid>:<restarts>" when it runs again
//	reachability    TransitionAt("reachable=<bool>:<hash of the reason>", since)
//	snapshotdone    the run ID ([NewSnapshotDone] does this)
//	nodesummary     "nodes:<counts>@rv:<highest Node resourceVersion counted>"
//	any deletion    "deleted" (the UID already makes it unique)
//
// Facts read from probes or logs (reachability, CONNECT failures) depend on
// the observer, so two agents may report them under different IDs;
// consumers treat events as level state and must be idempotent anyway.
//
// # Snapshots
//
// When the agent (re)starts, or whenever it decides to resynchronise, it
// restates the current problems it sees with [WithSnapshot](run), then
// publishes snapshotdone events for the same run: one for the management
// cluster and one per hosted cluster it could read, each listing the types
// covered and the objects whose problems are current (Problems).
//
// The run is NOT part of a snapshot event's ID: a restated fact keeps the ID
// of the fact, so JetStream drops it when the same fact was published inside
// the duplicate window (a restarted agent, or a new leader, does not put the
// same fact on the stream twice), and a consumer that missed it receives it.
// Periodic and requested restatements ([WithRestatement]; agents answer a
// bot's request on [RestateSubject]) salt the ID with the run instead, so
// every current fact gets a fresh copy on the stream and the bot's
// knowledge never depends on the stream's max age.
//
// Because a restated fact may thus be absent from the stream, consumers do
// not count snapshot events: a snapshotdone's Problems list is the
// inventory. A consumer may clear, for that source and cluster (none: the
// management cluster), the problems of the covered types whose object is not
// listed.
//
// # Decoding
//
// [Decode] enforces [MaxSize] (256 KiB) before parsing and reports failures
// with sentinel errors a consumer branches on: [ErrTooLarge] and
// [ErrMalformed] (never valid; dead-letter and alert), [ErrUnsupportedVersion]
// and [ErrUnknownType] (valid for someone else; dead-letter). A decoded
// event re-encodes with [Encode] to bytes that decode to the same event.
//
// payload.go is over 450 lines: it is the catalogue of what crosses NATS,
// every payload type with its EventType and sanitized (what is redacted
// before publishing) next to it; one list a reviewer reads whole when
// checking that no payload carries a secret.
package event
