package actions

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
)

// ErrNoImpersonation: As cannot build impersonating clients (no base
// configuration, or one that already impersonates).
var ErrNoImpersonation = errors.New("cannot act as the approver")

// writer is the management cluster's clients for the writes of an
// Executor made by As, and whom they act as.
type writer struct {
	id    identity.Identity
	extra map[string][]string
	dyn   dynamic.Interface
	kube  kubernetes.Interface
}

// As returns a copy of x whose writes in the management cluster are made
// as id, with client-go impersonation (Impersonate-User, -Group and
// -Extra; extra is identity.Extra of the action), so that the cluster's
// RBAC decides whether the approver may make the change and the API
// server's audit log records the approver as the user, the agent as the
// impersonator and the action in the extra:
//
//   - the noProxy patch of a HostedCluster or Proxy/cluster, its dry run,
//     and the patch of its rollback;
//   - the management Service an exposure creates (and its dry run), and
//     the Services an exposure's rollback deletes there.
//
// Reads stay the agent's own (the HostedCluster, kubeconfig Secrets,
// Nodes, the Services listed for node-port collisions and by action id),
// as do the Events RecordEvent records: the approver need not be able to
// read what the agent watches, only to make the change. Writes in a hosted
// cluster (an exposure's NodePort Service, its rollback's delete) are made
// as id too where id.Hosted names that cluster (identity.Entry.Hosted),
// through its admin kubeconfig impersonating; elsewhere with the admin
// kubeconfig's own identity. The cleanup of a hosted Service this
// execution created and could not pair is always the admin's: nothing the
// approver's rights could stop may leave a node port open.
//
// A write the approver's identity may not make fails with the API
// server's Forbidden, reported as ErrRejected naming the missing
// permission; nothing is retried with the agent's own rights. Access asks
// the same question beforehand.
//
// The copy builds its clients from x.Config (the base must not
// impersonate already: impersonation does not chain). It is meant for one
// execution; its clients hold their own connections.
func (x *Executor) As(id identity.Identity, extra map[string][]string) (*Executor, error) {
	if id.User == "" {
		return nil, fmt.Errorf("%w: an identity to act as needs a user name", identity.ErrNoIdentity)
	}
	if x.Config == nil {
		return nil, fmt.Errorf("%w: the executor has no base client configuration (Executor.Config)", ErrNoImpersonation)
	}
	if x.Config.Impersonate.UserName != "" || len(x.Config.Impersonate.Groups) > 0 {
		return nil, fmt.Errorf("%w: the executor's client configuration already impersonates %q, and impersonation does not chain", ErrNoImpersonation, x.Config.Impersonate.UserName)
	}
	cfg := rest.CopyConfig(x.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.User, Groups: slices.Clone(id.Groups), Extra: cloneExtra(extra)}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: client as %s: %w", ErrNoImpersonation, id.User, err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: client as %s: %w", ErrNoImpersonation, id.User, err)
	}
	y := *x
	y.writer = &writer{id: identity.Identity{User: id.User, Groups: slices.Clone(id.Groups), Hosted: slices.Clone(id.Hosted)}, extra: cloneExtra(extra), dyn: dc, kube: kc}
	return &y, nil
}

// ActingAs is the identity x's management writes are made as, and false
// when they are the agent's own.
func (x *Executor) ActingAs() (identity.Identity, bool) {
	if x.writer == nil {
		return identity.Identity{}, false
	}
	return identity.Identity{User: x.writer.id.User, Groups: slices.Clone(x.writer.id.Groups), Hosted: slices.Clone(x.writer.id.Hosted)}, true
}

// actsInHosted reports whether x's writes in hc's hosted cluster are
// made as the approver.
func (x *Executor) actsInHosted(hc *hypershift.HostedCluster) bool {
	return x.writer != nil && x.writer.id.InHosted(hc.Namespace+"/"+hc.Name)
}

// hostedWriter is the client of the writes in hc's hosted cluster: read
// (the admin kubeconfig's) unless x acts as the approver there, then a
// client of the same kubeconfig impersonating them, with the action's
// extras.
func (x *Executor) hostedWriter(ctx context.Context, hc *hypershift.HostedCluster, read kubernetes.Interface) (kubernetes.Interface, error) {
	if !x.actsInHosted(hc) {
		return read, nil
	}
	cfg, err := HostedRESTConfig(ctx, x.Kube, hc)
	if err != nil {
		return nil, err
	}
	// kubeconfig.RESTConfig refuses a kubeconfig that impersonates:
	// nothing to chain.
	cfg.Impersonate = rest.ImpersonationConfig{UserName: x.writer.id.User, Groups: slices.Clone(x.writer.id.Groups), Extra: cloneExtra(x.writer.extra)}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: hosted client as %s: %w", ErrNoImpersonation, x.writer.id.User, err)
	}
	return kc, nil
}

// writeDynamic makes the noProxy writes.
func (x *Executor) writeDynamic() dynamic.Interface {
	if x.writer != nil {
		return x.writer.dyn
	}
	return x.Dynamic
}

// writeKube makes the management Service writes.
func (x *Executor) writeKube() kubernetes.Interface {
	if x.writer != nil {
		return x.writer.kube
	}
	return x.Kube
}

func cloneExtra(extra map[string][]string) map[string][]string {
	if extra == nil {
		return nil
	}
	out := make(map[string][]string, len(extra))
	for k, v := range maps.All(extra) {
		out[k] = slices.Clone(v)
	}
	return out
}
