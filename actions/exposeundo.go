package actions

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/hypershift"
)

// permitsHostedDelete dry-runs with w, as the approver, the delete of
// each hosted Service of undo's exposure (listed with read); a list that
// cannot be made leaves it to the delete itself.
func permitsHostedDelete(ctx context.Context, read, w kubernetes.Interface, undo Undo) error {
	list, err := read.CoreV1().Services(undo.Expose.HostedNamespace).List(ctx, metav1.ListOptions{LabelSelector: actionSelector(undo.ActionID)})
	if err != nil {
		return nil
	}
	for _, svc := range list.Items {
		if !ownName(ClusterHosted, svc.Name, undo.ActionID) {
			continue
		}
		err := w.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			return fmt.Errorf("%w: hosted cluster: %w", ErrRejected, err)
		default:
			return fmt.Errorf("dry run of the delete of hosted Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	return nil
}

// deleteService deletes svc if it is still the object that was read (UID
// precondition), never a same-named replacement.
func deleteService(ctx context.Context, kc kubernetes.Interface, svc *corev1.Service) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	uid := types.UID(svc.UID)
	err := kc.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// rollbackExpose deletes the Services of undo's exposure. With observe it
// deletes nothing and returns a nil Result while any remains.
func (x *Executor) rollbackExpose(ctx context.Context, undo Undo, observe bool) (*Result, error) {
	hc, err := x.getHostedCluster(ctx, undo.Cluster)
	if err != nil {
		return nil, err
	}
	res := &Result{ActionID: undo.ActionID, Type: TypeRollback, Outcome: OutcomeUnchanged}
	// Management first: that closes the port reachable from outside, and
	// it still happens when the hosted cluster cannot be reached.
	cpNS := hypershift.ControlPlaneNamespace(hc.Namespace, hc.Name)
	if x.writer != nil && !observe {
		// As the approver, their right to the management delete is tried
		// first, whether or not the Service is still there: the hosted
		// delete that follows may be the admin kubeconfig's, and must
		// not be made for someone who may not roll the exposure back.
		name := ManagementServiceName(undo.ActionID)
		err := x.writeKube().CoreV1().Services(cpNS).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("%w: management cluster: %w", ErrRejected, err)
		default:
			return nil, fmt.Errorf("dry run of the delete of management Service %s/%s: %w", cpNS, name, err)
		}
	}
	// Acting as the approver there, so too their right to the hosted
	// delete, as them: refused, nothing is deleted in either cluster. A
	// hosted cluster that cannot be reached leaves it to the delete
	// itself, after the management one.
	var hosted, hostedW kubernetes.Interface
	if x.actsInHosted(hc) && !observe {
		if hosted, err = x.hostedClient(ctx, hc); err == nil {
			if hostedW, err = x.hostedWriter(ctx, hc, hosted); err != nil {
				return nil, err
			}
			if err := permitsHostedDelete(ctx, hosted, hostedW, undo); err != nil {
				return nil, err
			}
		}
	}
	if err := deleteOwned(ctx, x.Kube, x.writeKube(), ClusterManagement, cpNS, undo.ActionID, res, observe); err != nil {
		return res, err
	}
	if hosted == nil {
		if hosted, err = x.hostedClient(ctx, hc); err != nil {
			return res, err
		}
	}
	if hostedW == nil {
		if hostedW, err = x.hostedWriter(ctx, hc, hosted); err != nil {
			return res, err
		}
	}
	if err := deleteOwned(ctx, hosted, hostedW, ClusterHosted, undo.Expose.HostedNamespace, undo.ActionID, res, observe); err != nil {
		if len(res.Deleted) > 0 && errors.Is(err, ErrRejected) {
			// Not "nothing written": the management Service is gone.
			// The agent reads the cluster for what holds.
			// %s, not %w: the refusal's class (ErrRejected, "nothing
			// written") is not this result's.
			return res, fmt.Errorf("management Service deleted, then the hosted delete failed: %s", err.Error())
		}
		return res, err
	}
	if observe && len(res.Deleted) > 0 {
		return nil, nil
	}
	if len(res.Deleted) == 0 {
		res.Summary = fmt.Sprintf("Action %s has no Services left; nothing to delete.", undo.ActionID)
		return res, nil
	}
	res.Outcome = OutcomeRolledBack
	names := make([]string, 0, len(res.Deleted))
	for _, d := range res.Deleted {
		names = append(names, d.String())
	}
	res.Summary = fmt.Sprintf("Removed the exposure of action %s: deleted %s.", undo.ActionID, strings.Join(names, ", "))
	return res, nil
}

// deleteOwned deletes (with writer) the Services in namespace labelled as
// made by hcpbot for action id, found with reader, and records them in
// res; with observe it only records them.
func deleteOwned(ctx context.Context, reader, writer kubernetes.Interface, cluster, namespace, id string, res *Result, observe bool) error {
	list, err := reader.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: actionSelector(id)})
	if err != nil {
		return fmt.Errorf("list %s Services of action %s: %w", cluster, id, err)
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if !ownName(cluster, svc.Name, id) {
			// Labels are anyone's who may patch Services there: one
			// named otherwise (the app's own Service, labelled with the
			// action id) was not made by this action and is not deleted.
			continue
		}
		if !observe {
			if err := deleteService(ctx, writer, svc); err != nil {
				if apierrors.IsForbidden(err) {
					// RBAC refused the identity the deletion runs as (As),
					// or an admission policy did: definite, and named.
					err = fmt.Errorf("%w: %w", ErrRejected, err)
				}
				return fmt.Errorf("delete %s Service %s/%s: %w", cluster, svc.Namespace, svc.Name, err)
			}
		}
		res.Deleted = append(res.Deleted, ObjectRef{Cluster: cluster, Kind: "Service", Namespace: svc.Namespace, Name: svc.Name})
	}
	return nil
}
