package watchers

import (
	"context"
	"errors"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/event"
)

// emitIfChanged publishes f when its state differs from the last published
// one. A first sighting is published only when it is a problem: a healthy
// object is no news, and the snapshot covers problems.
func (a *Agent) emitIfChanged(ctx context.Context, k key, ref *event.ClusterRef, obj event.ObjectRef, f fact) {
	a.mu.Lock()
	prev, seen := a.states[k]
	a.states[k] = f.state
	a.mu.Unlock()
	if seen && prev == f.state {
		return
	}
	// A joining node was never published: its first healthy state is no
	// news either.
	if (!seen || prev == stateJoining) && !f.problem {
		return
	}
	a.emit(ctx, ref, obj, f)
}

func (a *Agent) emit(ctx context.Context, ref *event.ClusterRef, obj event.ObjectRef, f fact, opts ...event.Option) bool {
	e, err := event.New(a.cfg.Source, ref, obj, f.payload, f.key, a.now(), opts...)
	if err != nil {
		a.metrics.publishErrors.WithLabelValues("invalid").Inc()
		a.log.Error().Err(err).Str("kind", obj.Kind).Str("object", obj.Namespace+"/"+obj.Name).Msg("cannot build event")
		return false
	}
	return a.publish(ctx, e, false)
}

func (a *Agent) publish(ctx context.Context, e event.Event, wait bool) bool {
	var err error
	if wait {
		err = a.pub.PublishWait(ctx, e)
	} else {
		err = a.pub.Publish(ctx, e)
	}
	if err != nil {
		if !errors.Is(err, ErrBufferFull) {
			a.log.Warn().Err(err).Str("type", string(e.Type)).Msg("publish failed")
		}
		return false
	}
	return true
}

func (a *Agent) record(k key, state string) {
	a.mu.Lock()
	a.states[k] = state
	a.mu.Unlock()
}

func (a *Agent) state(k key) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.states[k]
}

func (a *Agent) forget(match func(key) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.states {
		if match(k) {
			delete(a.states, k)
		}
	}
	for k := range a.proxies {
		if match(k) {
			delete(a.proxies, k)
		}
	}
}

func objectRef(kind string, u *unstructured.Unstructured) event.ObjectRef {
	return event.ObjectRef{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), ResourceVersion: u.GetResourceVersion()}
}

func podRef(p *corev1.Pod, hosted bool) event.ObjectRef {
	return event.ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), ResourceVersion: p.ResourceVersion, Hosted: hosted}
}

func nodeRef(n *corev1.Node) event.ObjectRef {
	return event.ObjectRef{Kind: "Node", Name: n.Name, UID: string(n.UID), ResourceVersion: n.ResourceVersion, Hosted: true}
}

func itoa(i int) string { return strconv.Itoa(i) }
