// Package diagnose is the bot's model of each hosted cluster and the rules
// that explain what goes wrong in it. It knows nothing of NATS, Slack or
// incidents: the correlator feeds it events and turns its diagnoses into
// incidents.
//
// # State
//
// A [Cluster] holds what the events of one source and hosted cluster said
// last: the HostedCluster (proxy spec, networks, API endpoints, version,
// conditions), the recent proxy changes, NodePools, node readiness,
// crashlooping pods, the kube-apiserver-proxy of every worker, the
// virt-launcher pods and the agent's reachability probe. The management
// scope of a source (events without a hosted cluster, such as the
// OpenShift Proxy/cluster) is a Cluster with a zero [Key.Cluster].
//
// State is built only by [Cluster.Apply]. Events are level state, arrive
// at least once and not necessarily in order, so Apply is idempotent and
// keeps the newest fact per object: facts are ordered by their own time
// when both have one (a node's Ready lastTransitionTime, which a lagging
// agent cannot get wrong), else by the time the agent observed them, with
// the event ID as tie-breaker so that the outcome does not depend on
// arrival order. Deleted and cleared
// objects leave a small tombstone, so a late copy of an older fact cannot
// bring them back.
//
// [Cluster.ApplySnapshotDone] implements the snapshot contract of package
// event: the problems of the covered types whose objects the snapshot does
// not list are cleared, except those observed after the snapshot started,
// which the agent may not have been able to list yet. A management-scope
// snapshot covers HostedClusters, NodePools and virt-launcher pods, whose
// events carry a hosted cluster, so it applies to every Cluster of its
// source ([Model] does the routing). The agent restates every
// HostedCluster, so one missing from such a snapshot is gone.
//
// # Diagnoses
//
// A [Rule] is one small function that looks at a Cluster and may return
// one [Diagnosis]; [DefaultRules] lists them in priority order and
// [RuleSet.Diagnose] runs them. Each diagnosis names the symptoms it
// explains (keys such as "node/<name>", "pod/<ns>/<name>",
// "nodepool/<ns>/<name>", "proxy/<ns>/<name>", "api/<ns>/<name>",
// "cond/<Type>" for a HostedCluster condition,
// "cond/nodepool/<ns>/<name>/<Type>" for a NodePool's,
// "trustedca/<ns>/<configmap>", "virtlauncher/<ns>/<pod>"); later rules
// see them as [Explained] and leave them out, which is the inhibition
// inside one cluster: once the proxy tunnel explains the NotReady nodes
// and the service-ca-operator crash, no separate nodes-notready or
// operator-crashloop diagnosis repeats them.
//
// The order of [DefaultRules] and who explains what:
//
//	 #  rule                       explains (leaves out of later rules)
//	 1  proxy-tunnel               NotReady / not joining nodes, the operator's
//	                               apiserver-connectivity crash (operator-crashloop),
//	                               cond/ControlPlaneConnectionAvailable
//	                               (control-plane-unreachable), NodePools whose
//	                               machines did not reach ignition
//	                               (ignitionNotReached) when ignition goes through
//	                               the proxy too (ignition-unreachable; its fix
//	                               then adds the ignition host; the ignition
//	                               server's own failures stay with
//	                               ignition-unreachable), cond/DataPlaneConnectionAvailable
//	                               with NoWorkerNodesAvailable when every node is
//	                               down (konnectivity-down), the proxy spec
//	                               (risky-proxy-change)
//	 2  risky-proxy-change         the proxy spec
//	 3  hosted-not-watched         -
//	 4  etcd-unavailable           the API server (hosted-api-unreachable) when
//	                               KubeAPIServerAvailable=False, the connection
//	                               conditions (control-plane-unreachable,
//	                               konnectivity-down)
//	 5  hosted-api-unreachable     the connection conditions (control-plane-
//	                               unreachable, konnectivity-down)
//	 6  proxy-ca-invalid           its condition and ConfigMap
//	 7  control-plane-unreachable  its condition
//	 8  ignition-unreachable       the nodes not joining of its NodePools
//	                               (nodes-notready)
//	 9  nodes-notready             cond/DataPlaneConnectionAvailable with
//	                               NoWorkerNodesAvailable when every node is down
//	                               (konnectivity-down)
//	10  konnectivity-down          its condition
//	11  kubevirt-vms               its conditions, Pending virt-launcher pods
//	12  operator-crashloop         the crashlooping pods
//	13  management-proxy-lint      proxy/cluster
//
// TestInhibitionTable holds a case for each rule named in parentheses. [RuleSet.Explain] tells, per
// rule, whether it fired, was explained by an earlier rule (the rule runs
// again on its own and its symptoms are looked up), or saw nothing, with
// [RuleInfo] saying what it looks for.
//
// The output is a pure function of the state and now: evidence is sorted,
// every string is built from facts (no "5 minutes ago"), so the
// correlator can compare two results to see whether anything changed.
// Only proxy-ca-invalid depends on now (a trusted CA whose NotAfter has
// passed), so the correlator, which diagnoses after a change, reports an
// expiry at the cluster's next change, not at the very second; the agent
// judges nothing itself, so its fact does not change as time passes.
// Otherwise re-running Diagnose is only needed after Apply reported a
// change.
//
// Diagnosis has two phases. [RuleSet.Brief] is the first: which rules fire
// and on which symptoms (the same Rule and Symptoms as Diagnose, other
// fields possibly empty), without titles, evidence text or fixes. The
// correlator runs it on every event and the full Diagnose only when it
// renders or answers; [Cluster.Prior] keeps the state before an event
// for the incident an event clears (make bench, B1).
//
// # Node counts and grading
//
// "N of M nodes": N counts the nodes whose events report a problem (NotReady,
// Unknown, or not joining: no Ready condition past the agent's join grace),
// M is the total of the agent's newest node summary ([Cluster.Nodes]); from
// an agent without summaries, M falls back to the nodes the bot heard of.
// nodes-notready grades with [NodeSeverity]: critical when no node is
// Ready, when at least [NodesCriticalFraction] (half) of the nodes are
// affected, or when at least [NodesCriticalCount] (50) are; a warning
// otherwise, so 1 of 2,000 is a warning and 500 of 2,000 critical. The
// root cause states which rule applied. proxy-tunnel stays critical: its
// cause breaks every worker as the rollout proceeds.
//
// # The proxy rules
//
// HyperShift decides from the HostedCluster's spec noProxy whether the
// kube-apiserver-proxy on every worker goes straight to the API server or
// tunnels through the HTTPS proxy with HTTP CONNECT (see
// noproxy.HyperShiftBypass). Releases 4.14–4.22 search the noProxy string
// for substrings, later ones compare entries; the release comes from the
// HostedCluster's status.version (noproxy.RuleForRelease picks the rule and
// the diagnosis names both), and when it is unknown a cluster is at risk if
// either rule tunnels, and the diagnosis says the release is unknown. "proxy-tunnel" fires when the spec tunnels and
// symptoms appear; "risky-proxy-change" fires at once, before any symptom,
// when a proxy change turned a bypassing (or proxy-less) spec into a
// tunnelling one. Both propose the same noProxy fix: kubernetes and the
// first service and cluster networks, added with noproxy.Missing and
// noproxy.Merge, shown as a diff. When the kube-apiserver-proxy is fine,
// "risky-proxy-change" also fires for a proxy change that made one of the
// client families the cluster's workloads use (Cluster.SetClients,
// Model.SetClients; default noproxy.DefaultClients) send requests to the
// kubernetes Service IP through the proxy — urllib, wget and node ignore
// CIDR entries — and proposes adding that IP.
//
// Proxy URLs arrive redacted from package event; noProxy is shown through
// redact.RedactText as well, in case someone pasted a URL with credentials
// into it.
//
// # Files
//
// cluster.go is the state model of one hosted cluster (the Cluster type,
// its records and Apply); table.go the bounded, transition-only tables
// those records live in. rules.go lists the rules in priority order;
// each rule sits with its helpers in rules_proxy.go (proxy tunnel, risky
// proxy change), rules_hosted.go (not watched, API unreachable),
// rules_nodes.go (nodes NotReady or not joining), rules_operator.go
// (operator crashloop, management proxy lint), rules_conditions.go (the
// condition helpers and keys; etcd, control-plane connection,
// konnectivity), rules_ignition.go (ignition) and rules_infra.go (proxy
// CA bundle, KubeVirt VMs). warnings.go holds the proactive findings
// (Warnings: a proxy CA about to expire, ignition or konnectivity sent
// through the proxy) and the endpoint check risky-proxy-change shares
// with them. views.go holds the read
// views the rules share. cluster.go (about 490 lines) and views.go (about
// 450) stay whole on purpose: each is one type's methods over the same
// records, and split further they would scatter the invariants of Apply
// (idempotent, newest fact wins, tombstones) across files.
package diagnose
