package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/hcpbot/hcpbot/hypershift"
)

// Condition is a status condition as HyperShift writes it; the
// lastTransitionTime is set when the status changes.
type Condition struct {
	Type, Status, Reason, Message string
	// Since is the lastTransitionTime to write when the status changes
	// (zero: now), e.g. a condition that turned False days before the
	// agent started. HyperShift copies the HostedControlPlane's time
	// into the HostedCluster (hostedcluster_controller.go:830-839).
	Since time.Time
}

// SetHostedClusterConditions sets conditions of a HostedCluster's status,
// replacing those of the same type and keeping the others, as HyperShift's
// meta.SetStatusCondition does.
func SetHostedClusterConditions(ctx context.Context, dc dynamic.Interface, namespace, name string, conds ...Condition) error {
	return setConditions(ctx, dc, hypershift.HostedClusterGVR, namespace, name, conds)
}

// SetNodePoolConditions is SetHostedClusterConditions for a NodePool.
func SetNodePoolConditions(ctx context.Context, dc dynamic.Interface, namespace, name string, conds ...Condition) error {
	return setConditions(ctx, dc, hypershift.NodePoolGVR, namespace, name, conds)
}

// SetHostedClusterStatusField sets one string field of a HostedCluster's
// status (e.g. ignitionEndpoint).
func SetHostedClusterStatusField(ctx context.Context, dc dynamic.Interface, namespace, name, field, value string) error {
	ri := dc.Resource(hypershift.HostedClusterGVR).Namespace(namespace)
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(u.Object, value, "status", field); err != nil {
		return err
	}
	_, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

func setConditions(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, namespace, name string, conds []Condition) error {
	ri := dc.Resource(gvr).Namespace(namespace)
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	old, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", gvr.Resource, namespace, name, err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	// HyperShift stamps every HostedCluster and NodePool condition with
	// the object's generation (hostedcluster_controller.go:830-839,
	// nodepool/conditions.go SetStatusCondition).
	generation := u.GetGeneration()
	for _, c := range conds {
		at := now
		if !c.Since.IsZero() {
			at = metav1.NewTime(c.Since.Truncate(time.Second))
		}
		cond := condition(c.Type, c.Status, c.Reason, c.Message, at)
		cond["observedGeneration"] = generation
		replaced := false
		for i, o := range old {
			om, _ := o.(map[string]any)
			if om["type"] != c.Type {
				continue
			}
			if om["status"] == c.Status {
				// Same status: HyperShift keeps the transition time.
				cond["lastTransitionTime"] = om["lastTransitionTime"]
			}
			old[i], replaced = cond, true
		}
		if !replaced {
			old = append(old, cond)
		}
	}
	if err := unstructured.SetNestedSlice(u.Object, old, "status", "conditions"); err != nil {
		return err
	}
	_, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// SetPausedUntil sets spec.pausedUntil of a HostedCluster or NodePool
// (gvr), or removes it when value is nil, as the documented
// `oc patch --type=merge -p '{"spec":{"pausedUntil":...}}'` does
// (hypershift docs/content/how-to/pause-reconciliation.md:23-26). It
// returns the object's new metadata.generation (a spec change bumps it).
func SetPausedUntil(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, namespace, name string, value *string) (int64, error) {
	v := "null"
	if value != nil {
		b, err := json.Marshal(*value)
		if err != nil {
			return 0, err
		}
		v = string(b)
	}
	patch := []byte(`{"spec":{"pausedUntil":` + v + `}}`)
	u, err := dc.Resource(gvr).Namespace(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return 0, fmt.Errorf("set pausedUntil of %s %s/%s: %w", gvr.Resource, namespace, name, err)
	}
	return u.GetGeneration(), nil
}
