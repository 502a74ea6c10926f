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
//	                               ControlPlaneConnectionAvailable=False
//	                               (control-plane-unreachable), NodePools whose
//	                               machines did not reach ignition
//	                               (ignitionNotReached) when ignition goes through
//	                               the proxy too (ignition-unreachable; its fix
//	                               then adds the ignition host; the ignition
//	                               server's own failures stay with
//	                               ignition-unreachable), both connection
//	                               conditions Unknown/NoWorkerNodesAvailable when
//	                               no node is available (no-workers), the proxy
//	                               spec (risky-proxy-change)
//	 2  risky-proxy-change         the proxy spec
//	 3  hosted-not-watched         -
//	 4  etcd-unavailable           the API server (hosted-api-unreachable) when
//	                               KubeAPIServerAvailable=False, the connection
//	                               conditions False or Unknown/ReconcileError
//	                               (control-plane-unreachable, konnectivity-down,
//	                               connection-unknown)
//	 5  hosted-api-unreachable     cond/Available and cond/ExternalDNSReachable it
//	                               reads (control-plane-components), the
//	                               connection conditions False or
//	                               Unknown/ReconcileError (control-plane-
//	                               unreachable, konnectivity-down,
//	                               connection-unknown)
//	 6  control-plane-components   cond/Available (ComponentsNotAvailable)
//	 7  proxy-ca-invalid           its condition and ConfigMap
//	 8  control-plane-unreachable  ControlPlaneConnectionAvailable=False
//	 9  ignition-unreachable       the nodes not joining of its NodePools
//	                               (nodes-notready)
//	10  nodes-notready             both connection conditions
//	                               Unknown/NoWorkerNodesAvailable when no node is
//	                               available (no-workers)
//	11  no-workers                 both connection conditions
//	                               Unknown/NoWorkerNodesAvailable
//	12  konnectivity-down          DataPlaneConnectionAvailable=False
//	13  connection-unknown         the connection conditions Unknown
//	                               (ReconcileError, ConfigMapNotFound)
//	14  kubevirt-vms               its conditions, Pending virt-launcher pods
//	15  operator-crashloop         the crashlooping pods
//	16  management-proxy-lint      proxy/cluster
//
// # HyperShift's conditions as the rules read them
//
// Every rule reads a condition by its status and reason as HyperShift
// writes it (openshift/hypershift 3ee9615; HO =
// hypershift-operator/controllers/hostedcluster/hostedcluster_controller.go,
// CPO = control-plane-operator/controllers/hostedcontrolplane/hostedcontrolplane_controller.go,
// HCCO = control-plane-operator/hostedclusterconfigoperator/controllers/resources/resources.go,
// NP = hypershift-operator/controllers/nodepool/conditions.go, API =
// api/hypershift/v1beta1/hostedcluster_conditions.go). A message is read
// only where the reason is ambiguous (marked msg). Texts print the
// condition as observed ("Type=Status, Reason"), never a fixed status.
// The lastTransitionTime moves only when the status changes
// (apimachinery meta.SetStatusCondition), so it is the start of the
// status, older than the reason: Diagnosis.Began takes it.
//
//	condition / status / reason                   meaning                                   rule                      source
//	any / Unknown / StatusUnknown                 not reported (no HCP, or the condition    -                         HO:823-836, CPO:812-814
//	                                              not in it: older control plane; external
//	                                              DNS not configured)
//	DataPlaneConn / Unknown / NoWorkerNodes...    no Ready, schedulable node                nodes-notready, no-workers HCCO:1675-1680, util.go:568-590
//	ControlPlaneConn / Unknown / NoWorkerNodes... same                                      nodes-notready, no-workers HCCO:1888-1892
//	DataPlaneConn / Unknown / ReconcileError      HCCO cannot list the nodes                connection-unknown        HCCO:1668-1673
//	ControlPlaneConn / Unknown / ReconcileError   same, or cannot read the check ConfigMap  connection-unknown        HCCO:1882-1887, 1904-1908
//	ControlPlaneConn / Unknown / ConfigMapNotFound the check's ConfigMap is not there yet   connection-unknown (info) HCCO:1894-1903
//	DataPlaneConn / False / ReconciliationError   HCCO cannot list konnectivity-agent pods  konnectivity-down         HCCO:1681-1687
//	DataPlaneConn / False / KonnectivityAgent-    msg "Couldn't find any ... running": no   konnectivity-down         HCCO:1707-1709
//	  PodsNotFound                                agent pod Running
//	DataPlaneConn / False / KonnectivityAgent-    msg "failed to read ... logs": agents     konnectivity-down         HCCO:1710-1713
//	  PodsNotFound                                Running, API server → konnectivity →
//	                                              kubelet path broken
//	DataPlaneConn / False / LogsAccessFailed      as the previous (declared, never set:     konnectivity-down         API:349
//	                                              forward compatibility)
//	ControlPlaneConn / False / KASAccessFailed    msg: no success ever recorded, or the     control-plane-unreachable HCCO:1911-1926
//	                                              stamp unreadable
//	ControlPlaneConn / False / ConnectionCheck-   last success > 5 min ago: the workers     control-plane-unreachable HCCO:1928-1933, API:252-253
//	  Stale                                       fail to reach the API server
//	EtcdAvailable / False / (any)                 etcd down                                 etcd-unavailable          CPO (copied, HO:805-841)
//	KubeAPIServerAvailable / False / (any)        API server down                           hosted-api-unreachable    CPO (copied, HO:805-841)
//	Available / False / KASLoadBalancerNot-       the API endpoint's LB/Route/NodePort      hosted-api-unreachable    CPO:929-931, 955-1043
//	  Reachable                                   health check fails (critical)
//	Available / False / ComponentsNotAvailable    msg names the components; bring-up        control-plane-components  CPO:825-829, 932-937, 1073-1097
//	ExternalDNSReachable / False / ExternalDNS-   msg = the resolver's error for the API    hosted-api-unreachable    CPO:788-818, netutil/iputil.go:49-59
//	  HostNotReachable                            hostname
//	IgnitionEndpointAvailable (HC) / False /      the ignition-server Deployment is missing ignition-unreachable      HO:1146-1152
//	  NotFound
//	IgnitionEndpointAvailable (HC) / False /      the ignition-server Deployment is not     ignition-unreachable      HO:1157-1163
//	  WaitingForAvailable                         Available
//	IgnitionEndpointAvailable (NodePool) / False  IgnitionEndpointMissing,                  ignition-unreachable      NP:272-348,
//	                                              IgnitionCACertMissing,                                              nodepool_conditions.go:130-131
//	                                              ExternalDNSHostNotReachable
//	ReachedIgnitionEndpoint (NodePool) / False    machines did not fetch ignition           ignition-unreachable,     NP
//	                                                                                        proxy-tunnel
//	ValidProxyConfiguration / False / ProxyCA-    msg: missing (ConfigMap or key),          proxy-ca-invalid          HO:1039-1063,
//	  BundleInvalid                               unusable, "is not yet valid" (NotBefore                             proxy/validation.go:24-69
//	                                              in the future: clock skew or a pre-dated
//	                                              CA, not expired), "was no longer valid"
//	                                              (expired)
//	ValidKubeVirtInfraNetworkPolicyRBAC / False / weaker tenant isolation, a grant on      kubevirt-vms (warning)    network_policies.go:1099-1119
//	  InfraClusterNetworkReadFailed               networks.config.openshift.io needed
//	ValidKubeVirtInfraNetworkPolicyRBAC / False / the virt-launcher NetworkPolicy cannot   kubevirt-vms (warning)    network_policies.go:1073-1087
//	  InfraClusterNetworkPolicyCreateFailed       be created: grant on networkpolicies
//	KubeVirtNodesLiveMigratable, ValidKubeVirt-   not live-migratable, MTU too small        kubevirt-vms              HO
//	  InfraNetworkMTU / False
//	ReconciliationActive (HC, NodePool) / False / paused: stated in every diagnosis        every rule (evidence)     pausereconcile.go:52-82, HO:1179,
//	  ReconciliationPaused                                                                                            NP:127-160
//	ReconciliationActive / True / InvalidPaused-  spec.pausedUntil set but not paused       every rule (evidence)     pausereconcile.go:71-73
//	  UntilValue
//
// The hosted cluster's own evidence, from the agent: the aggregated
// APIServices that are not Available (event.APIServiceState; v1.*.openshift.io
// with FailedDiscoveryCheck means the API server does not reach
// openshift-apiserver through konnectivity-server and the control-plane
// konnectivity-agent, hypershift#313 — an inference from the routing,
// hedged in the text) for konnectivity-down, and the connectivity-check
// record kube-system/control-plane-connectivity-check (event.ConnectivityCheck:
// lastSucceeded, stale) for control-plane-unreachable and
// connection-unknown. HyperShift counts only Ready, schedulable nodes as
// available workers, so NodeCount.Available (Ready minus cordoned) is what
// its NoWorkerNodesAvailable sees.
//
// # Paused reconciliation
//
// spec.pausedUntil of the HostedCluster or a NodePool is read with
// event.ReadPausedUntil ("true", or an RFC3339 time in the future; any
// other value pauses nothing). [Cluster.Paused] lists what is paused;
// every diagnosis of a paused cluster carries it ([Diagnosis.Paused]), an
// evidence line, a sentence of its root cause and the lift command
// (oc patch -n <ns> hostedclusters/<name> --type=merge -p
// '{"spec":{"pausedUntil":null}}', nodepools likewise) in its next steps;
// its fix says the rollout waits for the pause ([Fix.Waits]). While the
// HostedCluster is paused the hosted-cluster-config-operator does not run
// (HCCO:357-360): the connection conditions are marked frozen and a
// diagnosis resting on them has low confidence. [Cluster.Rollout] lists
// the pauses too, so the bot's remediation tracking says a fix waits for
// the pause instead of rolling out or failing.
//
// TestInhibitionTable holds a case for each rule named in parentheses. [RuleSet.Explain] tells, per
// rule, whether it fired, was explained by an earlier rule (the rule runs
// again on its own and its symptoms are looked up), or saw nothing, with
// [RuleInfo] saying what it looks for.
//
// The output is a pure function of the state and now: evidence is sorted,
// every string is built from facts (no "5 minutes ago"), so the
// correlator can compare two results to see whether anything changed.
// Only proxy-ca-invalid (a trusted CA whose NotAfter has passed) and the
// pause note (a spec.pausedUntil time that has passed) depend on now, so
// the correlator, which diagnoses after a change, reports an expiry or a
// pause's end at the cluster's next change, not at the very second (the
// remediation tracking looks again when a timed pause ends); the agent
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
// status-aware condition lookup, keys and etcd), rules_connection.go
// (control-plane connection, no workers, konnectivity, connections not
// evaluated), rules_ignition.go (ignition) and rules_infra.go (proxy
// CA bundle, KubeVirt VMs); pause.go reads paused reconciliation and
// when a problem began. warnings.go holds the proactive findings
// (Warnings: a proxy CA about to expire, ignition or konnectivity sent
// through the proxy) and the endpoint check risky-proxy-change shares
// with them. views.go holds the read
// views the rules share. checkpoint.go saves and restores the model
// (ModelCheckpoint).
//
// cluster.go is over 450 lines: it is one type's methods over the same
// records (the Cluster, its records and Apply), and split further it
// would scatter the invariants of Apply (idempotent, newest fact wins,
// tombstones) across files; views.go, at about 450, stays whole for the
// same reason.
//
// checkpoint.go is over 450 lines: it mirrors every record of cluster.go
// with its saved form and the two conversions side by side, so that a
// field added to a record is added to its checkpoint in the same place;
// cut in two, a record's save and restore would sit apart.
package diagnose
