// Package actions executes the cluster changes hcpbot proposes, once a
// person has approved them (the approval flow lives elsewhere):
//
//   - PatchNoProxy appends missing entries to a HostedCluster's
//     spec.configuration.proxy.noProxy (or OpenShift's Proxy/cluster);
//   - Expose publishes a hosted Service through NodePorts on a KubeVirt
//     hosted cluster (seed 004): a NodePort Service in the control-plane
//     namespace forwards the hosted node ports to the virt-launcher pods;
//     the hosted Service's own node ports when it already is of type
//     NodePort (nothing is created in the hosted cluster), else those of a
//     NodePort copy created in the hosted cluster, on node ports the
//     request may choose. Node ports out of range or already allocated are
//     refused before any write, with the nearest free ones
//     (PortCollisionError); Preflight asks the same, reading only, when
//     the exposure is proposed (the agent answers the bot's preflight,
//     package approval);
//   - Rollback undoes either, using the Undo data a Result carries.
//
// Every change is guarded: a proposal is computed from a value the user saw,
// so when the cluster no longer holds that value the executor writes nothing
// and returns ErrConflict, and the caller re-proposes. Writes are checked by
// a server-side dry run first and then made with optimistic concurrency on
// the resourceVersion that was read, so a concurrent edit is never
// overwritten. A noProxy patch whose write meets a newer resourceVersion
// (HyperShift writing the status) reads again and retries, a few times, as
// long as the noProxy still is the value the proposal was made for.
//
// Re-running an action is safe, and truthful: the agent may die after a
// write and before its result is recorded, or lose the API server's answer.
// Every write marks what it changed with the action id (AnnotationAction
// on a HostedCluster or Proxy/cluster, in the same patch as the value;
// LabelActionID on the Services of an exposure), so a re-run recognises
// its own earlier write and reports "applied" (or "rolled-back") with the
// same Undo, where it would otherwise see a changed value and report a
// conflict. Transient tells a failure worth retrying unchanged (API server
// 5xx, 429, network, timeouts) from a definite answer; Observe reports,
// reading only, whether a change is in place, for a caller whose retries
// ran out; RecordEvent records each execution as a Kubernetes Event on the
// object changed, naming the action id and the people behind it.
//
// This package is the executor only. Whether a change may be made, and
// how the request reaches the agent, is package approval's (its Permit is
// the one rule); the agent calls Execute only for what Permit accepted.
// A change is validated once at each boundary: when the bot proposes it
// (approval.Flow.Propose; the proposal's seal keeps it unchanged until it
// runs) and when the agent executes it (Execute). The executor's paths
// past Execute take the validated value and do not validate again.
//
// Acting as the approver (issue 28): As returns a copy of the executor
// whose management writes — the noProxy patch (and its dry run) of a
// HostedCluster or Proxy/cluster and of its rollback, the management
// Service an exposure creates and the Services its rollback deletes —
// impersonate the approver's mapped Kubernetes identity (package
// identity), with the action id, the requester and the approvers as
// Impersonate-Extra, so the cluster's RBAC decides and its audit log
// records who asked, who approved and which action. Reads and Events stay
// the agent's own. A write the identity may not make fails with the API
// server's Forbidden, reported as ErrRejected naming the permission;
// nothing falls back to the agent's rights. Access asks the same question
// beforehand (SubjectAccessReview per write), so an approver who may not
// make a change is told when approving. ImpersonationRole is the RBAC
// that lets the agent impersonate exactly the mapped identities
// (`hcpbot rbac`).
//
// Writes in a HOSTED cluster are not impersonated: they keep using the
// admin kubeconfig HyperShift stores, because impersonation there would
// need the hosted cluster's own RBAC to know the mapped users (their
// identity provider is the hosted cluster's, not the management
// cluster's) and an admin kubeconfig that may impersonate them. Left for
// later; the exposure's hosted Service is created and deleted by the agent,
// and the management Service, which opens the port, by the approver.
//
// Privileges: in the management cluster the executor needs only what
// configs/deploy/agent/rbac.yaml grants (and, to act as approvers, the
// generated impersonation role). In a hosted cluster it acts with
// the admin kubeconfig HyperShift stores, which is far more than creating
// and deleting one Service needs; HostedRESTConfig therefore builds its
// client with package kubeconfig, which accepts inline credentials only
// and refuses kubeconfigs that would run plugins, read local files, skip
// TLS verification, use a proxy or impersonate, and Expose and Rollback
// only ever delete Services carrying their own action id label.
// Cluster data (node addresses, Service specs) is reported, never dialled.
package actions
