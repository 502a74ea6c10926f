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

// SetPausedUntil sets spec.pausedUntil of a HostedCluster (gvr
// hypershift.HostedClusterGVR) or NodePool (hypershift.NodePoolGVR) as
// written: "true", an RFC3339 time, or anything the CRD's pattern lets
// through (hostedcluster_types.go:791-799, nodepool_types.go:207-215);
// "" removes it, like `oc patch … -p '{"spec":{"pausedUntil":null}}'`.
// HyperShift's ReconciliationActive condition is the caller's to set
// (SetHostedClusterConditions), as HyperShift writes it on its next pass.
func SetPausedUntil(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, namespace, name, value string) error {
	patch := `{"spec":{"pausedUntil":null}}`
	if value != "" {
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"pausedUntil": value}})
		if err != nil {
			return fmt.Errorf("pausedUntil %q: %w", value, err)
		}
		patch = string(b)
	}
	if _, err := dc.Resource(gvr).Namespace(namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set pausedUntil of %s %s/%s: %w", gvr.Resource, namespace, name, err)
	}
	return nil
}
