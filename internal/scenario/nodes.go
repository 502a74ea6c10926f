package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeWorkers bounds the requests in flight when creating or updating many
// Nodes: enough to be quick, few enough not to trip the API server's
// max-in-flight limit on a busy test machine.
const NodeWorkers = 16

// KubeletNode is a Node as the kubelet registers it: the object without
// status, which the kubelet posts in a second write (PostKubeletStatus).
func KubeletNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": "",
		}},
		Spec: corev1.NodeSpec{ProviderID: "kubevirt://" + name},
	}
}

// KubeletStatus is the status a kubelet posts: the pressure conditions and
// Ready with the kubelet's reasons and messages, and the node's addresses.
// ready False is what a kubelet whose runtime network is not ready posts.
func KubeletStatus(name string, ready corev1.ConditionStatus, at time.Time) corev1.NodeStatus {
	t := metav1.NewTime(at.Truncate(time.Second))
	cond := func(typ corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: t}
	}
	readyCond := cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
	if ready == corev1.ConditionFalse {
		readyCond = cond(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady",
			"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: no CNI configuration file in /etc/kubernetes/cni/net.d/. Has your network provider started?")
	}
	return corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			readyCond,
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP(name)}, {Type: corev1.NodeHostName, Address: name}},
		NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.31.9", OperatingSystem: "linux", Architecture: "amd64"},
	}
}

// CreateNodes registers n Nodes <prefix>-<i> with at most NodeWorkers
// requests in flight and, if ready is not empty, posts each one's kubelet
// status with that Ready status right after. It returns the names in order.
func CreateNodes(ctx context.Context, kc kubernetes.Interface, prefix string, n int, ready corev1.ConditionStatus) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	err := ForEach(ctx, n, NodeWorkers, func(ctx context.Context, i int) error {
		created, err := kc.CoreV1().Nodes().Create(ctx, KubeletNode(names[i]), metav1.CreateOptions{FieldManager: "kubelet"})
		if err != nil {
			return fmt.Errorf("create node %s: %w", names[i], err)
		}
		if ready == "" {
			return nil
		}
		created.Status = KubeletStatus(names[i], ready, time.Now())
		_, err = kc.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kubelet"})
		return err
	})
	return names, err
}

// PostKubeletStatus writes the kubelet's status of each named node with
// the given Ready status, NodeWorkers at a time.
func PostKubeletStatus(ctx context.Context, kc kubernetes.Interface, names []string, ready corev1.ConditionStatus) error {
	return ForEach(ctx, len(names), NodeWorkers, func(ctx context.Context, i int) error {
		node, err := kc.CoreV1().Nodes().Get(ctx, names[i], metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status = KubeletStatus(names[i], ready, time.Now())
		_, err = kc.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{FieldManager: "kubelet"})
		return err
	})
}

// ForEach runs fn for 0..n-1 on workers goroutines, retrying what an
// overloaded API server answers; the first other error stops it.
func ForEach(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := retryOverload(ctx, func() error { return fn(ctx, i) }); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func retryOverload(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 6 {
		if err = fn(); err == nil || !(apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsConflict(err)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
	return err
}
