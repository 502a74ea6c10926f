package watchers

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hcpbot/hcpbot/event"
)

// A hosted cluster's own evidence of its control plane's reachability,
// beside what HyperShift's conditions say about it: the aggregated
// APIServices (served through konnectivity) and the connectivity-check
// record the workers stamp.

// APIServiceGVR is apiregistration.k8s.io/v1 APIServices, read in each
// hosted cluster.
var APIServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// The connectivity-check record HyperShift's hosted-cluster-config-operator
// creates empty and the kas-connection-checker pods stamp
// (hostedclusterconfigoperator/controllers/resources/manifests/kasconnectionchecker.go).
const (
	ConnectivityCheckNamespace = "kube-system"
	ConnectivityCheckName      = "control-plane-connectivity-check"
	// ConnectivityCheckKey holds the last success, UTC, written by the
	// checker as date -u +%Y-%m-%dT%H:%M:%SZ (resources.go:1762-1782).
	ConnectivityCheckKey = "lastSucceeded"
)

// Defaults of Config.ConnectivityStaleAfter and ConnectivityInterval.
const (
	// DefaultConnectivityStaleAfter is HyperShift's threshold: older than
	// 5 minutes, ControlPlaneConnectionAvailable turns False with
	// ConnectionCheckStale (resources.go:1928-1933).
	DefaultConnectivityStaleAfter = 5 * time.Minute
	// DefaultConnectivityInterval: a stamp that stopped moving is found
	// stale at most this long after the threshold.
	DefaultConnectivityInterval = 30 * time.Second
)

// maxRawStamp bounds what the cache keeps of lastSucceeded: the checker
// writes 20 characters; anything longer is only reported as unparsable.
const maxRawStamp = 64

// apiServiceView is what the agent reads of an APIService.
type apiServiceView struct {
	name, uid, rv string
	// service is spec.service as namespace/name; empty for a local
	// APIService (served by the kube-apiserver itself).
	service                 string
	port                    int64
	hasAvailable            bool
	status, reason, message string
	lastTransition          string // RFC3339, as written
}

func readAPIService(u *unstructured.Unstructured) apiServiceView {
	v := apiServiceView{name: u.GetName(), uid: string(u.GetUID()), rv: u.GetResourceVersion()}
	if svc, ok, _ := unstructured.NestedMap(u.Object, "spec", "service"); ok && svc != nil {
		ns, _ := svc["namespace"].(string)
		name, _ := svc["name"].(string)
		v.service = ns + "/" + name
		v.port, _, _ = unstructured.NestedInt64(svc, "port")
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Available" {
			continue
		}
		v.hasAvailable = true
		v.status, _ = m["status"].(string)
		v.reason, _ = m["reason"].(string)
		v.message, _ = m["message"].(string)
		v.lastTransition, _ = m["lastTransitionTime"].(string)
	}
	return v
}

// object is the slim APIService the cache keeps.
func (v apiServiceView) object() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	u.SetName(v.name)
	u.SetUID(types.UID(v.uid))
	u.SetResourceVersion(v.rv)
	if v.service != "" {
		ns, name, _ := strings.Cut(v.service, "/")
		svc := map[string]any{"namespace": ns, "name": name}
		if v.port != 0 {
			svc["port"] = v.port
		}
		u.Object["spec"] = map[string]any{"service": svc}
	}
	if v.hasAvailable {
		u.Object["status"] = map[string]any{"conditions": []any{map[string]any{
			"type": "Available", "status": v.status, "reason": v.reason, "message": v.message, "lastTransitionTime": v.lastTransition,
		}}}
	}
	return u
}

// transformAPIService keeps the name, spec.service and the Available
// condition: a hosted cluster has some 90 APIServices, most of them local.
func transformAPIService(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	return readAPIService(u).object(), nil
}

// apiServiceFact states an aggregated APIService's availability. ok is
// false when there is nothing to state: a local APIService, or one the
// aggregator has not judged yet. The state is (status, reason): the
// message of FailedDiscoveryCheck quotes the last dial error and changes
// without the health changing.
func apiServiceFact(v apiServiceView) (f fact, ok bool) {
	if v.service == "" || !v.hasAvailable {
		return fact{}, false
	}
	ltt, _ := time.Parse(time.RFC3339, v.lastTransition)
	p := event.APIServiceState{
		Name: v.name, Service: v.service, Available: event.ConditionStatus(v.status),
		Reason: v.reason, Message: v.message, LastTransitionTime: ltt,
	}
	state := "Available=" + v.status
	if v.status == string(event.ConditionTrue) {
		p.Cleared = true
	} else {
		state += "/" + v.reason
	}
	// The resourceVersion makes a reason that comes back a new fact
	// (lastTransitionTime moves only with the status).
	return fact{payload: p, key: state + "@" + rvKey(v.rv), state: state, problem: !p.Cleared}, true
}

func apiServiceRef(v apiServiceView) event.ObjectRef {
	return event.ObjectRef{Kind: "APIService", Name: v.name, UID: v.uid, ResourceVersion: v.rv, Hosted: true}
}

// syncAPIService publishes an APIService's change of availability; a
// problem that is deleted, or becomes local, is cleared.
func (a *Agent) syncAPIService(ctx context.Context, k key, u *unstructured.Unstructured) {
	ref := k.cluster
	v := readAPIService(u)
	if f, ok := apiServiceFact(v); ok {
		a.emitIfChanged(ctx, k, &ref, apiServiceRef(v), f)
		return
	}
	if v.service == "" {
		a.apiServiceGone(ctx, k)
	}
}

// apiServiceGone clears an APIService that was published as a problem.
func (a *Agent) apiServiceGone(ctx context.Context, k key) {
	prev := a.state(k)
	a.forgetKey(k)
	if prev == "" || prev == "Available=True" {
		return
	}
	ref := k.cluster
	obj := event.ObjectRef{Kind: "APIService", Name: k.name, Hosted: true}
	p := event.APIServiceState{Name: k.name, Available: event.ConditionUnknown, Cleared: true}
	a.emit(ctx, &ref, obj, fact{payload: p, key: "deleted:" + prev})
}

// transformConnectivityCheck keeps data.lastSucceeded (bounded) only.
func transformConnectivityCheck(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	out := &corev1.ConfigMap{ObjectMeta: slimMeta(cm.ObjectMeta)}
	out.Labels = nil
	if v, ok := cm.Data[ConnectivityCheckKey]; ok {
		if len(v) > maxRawStamp {
			v = v[:maxRawStamp]
		}
		out.Data = map[string]string{ConnectivityCheckKey: v}
	}
	return out, nil
}

// The states of the connectivity-check record.
const (
	connMissing    = "missing"    // no ConfigMap (HyperShift: Unknown/ConfigMapNotFound)
	connNoRecord   = "norecord"   // no lastSucceeded yet (False/KASAccessFailed)
	connUnparsable = "unparsable" // not RFC3339 (False/KASAccessFailed)
	connStale      = "stale"      // older than StaleAfter (False/ConnectionCheckStale)
	connFresh      = "fresh"
)

// connectivityFact judges the record at now. lastRV is the
// resourceVersion of the record last seen, which keys its absence.
func connectivityFact(cm *corev1.ConfigMap, now time.Time, staleAfter time.Duration, lastRV string) (fact, event.ObjectRef) {
	obj := event.ObjectRef{Kind: "ConfigMap", Namespace: ConnectivityCheckNamespace, Name: ConnectivityCheckName, Hosted: true}
	p := event.ConnectivityCheck{StaleAfter: staleAfter, ObservedAt: now}
	if cm == nil {
		p.Missing = true
		return fact{payload: p, key: connMissing + "@" + rvKey(lastRV), state: connMissing, problem: true}, obj
	}
	obj.UID, obj.ResourceVersion = string(cm.UID), cm.ResourceVersion
	raw := cm.Data[ConnectivityCheckKey]
	if raw == "" {
		p.Stale = true
		return fact{payload: p, key: connNoRecord + "@" + rvKey(cm.ResourceVersion), state: connNoRecord, problem: true}, obj
	}
	// HyperShift parses it as RFC3339 (resources.go:1920-1926).
	at, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		p.Raw, p.Stale = raw, true
		return fact{payload: p, key: connUnparsable + "@" + rvKey(cm.ResourceVersion), state: connUnparsable, problem: true}, obj
	}
	p.LastSucceeded = at
	state := connFresh
	if now.Sub(at) > staleAfter {
		p.Stale, state = true, connStale
	}
	// Keyed by the stamp: every agent judging the same stamp stale derives
	// the same ID, and the next stamp's fresh state is a new fact.
	return fact{payload: p, key: event.TransitionAt(state, at), state: state, problem: p.Stale}, obj
}

func connectivityKey(ref event.ClusterRef) key {
	return key{kind: kindConnectivity, cluster: ref, namespace: ConnectivityCheckNamespace, name: ConnectivityCheckName}
}

// readConnectivity judges hc's cached record at now. ok is false when it
// cannot be judged: the cache has not synced (absent is not missing yet),
// or the cluster's API server is unreachable, when the cached stamp stops
// moving because the agent sees no update, not because the workers failed.
func (a *Agent) readConnectivity(hc *hostedCluster, conn *hostedConn) (f fact, obj event.ObjectRef, ok bool) {
	if !conn.hasSynced() {
		return fact{}, event.ObjectRef{}, false
	}
	hc.mu.Lock()
	blind := hc.reach.known && (!hc.reach.reachable || hc.reach.unwatched)
	hc.mu.Unlock()
	if blind {
		return fact{}, event.ObjectRef{}, false
	}
	cm, err := conn.connCheck.ConfigMaps(ConnectivityCheckNamespace).Get(ConnectivityCheckName)
	if err != nil && !apierrors.IsNotFound(err) {
		return fact{}, event.ObjectRef{}, false
	}
	hc.mu.Lock()
	if cm != nil {
		hc.connCheckRV = cm.ResourceVersion
	}
	lastRV := hc.connCheckRV
	hc.mu.Unlock()
	f, obj = connectivityFact(cm, a.now(), a.cfg.ConnectivityStaleAfter, lastRV)
	return f, obj, true
}

// judgeConnectivity publishes a change of hc's connectivity-check state.
func (a *Agent) judgeConnectivity(ctx context.Context, hc *hostedCluster, conn *hostedConn) {
	if f, obj, ok := a.readConnectivity(hc, conn); ok {
		ref := hc.ref
		a.emitIfChanged(ctx, connectivityKey(ref), &ref, obj, f)
	}
}

// judgeAllConnectivity is the periodic pass over every hosted cluster's
// cached record: a stamp that stops moving changes nothing in the
// ConfigMap, so only the agent's clock can find it stale. One lister read
// per cluster; only changes are published (fresh → fresh is no news).
func (a *Agent) judgeAllConnectivity(ctx context.Context) {
	for _, hc := range a.hostedSnapshotList() {
		hc.mu.Lock()
		conn := hc.conn
		hc.mu.Unlock()
		if conn != nil && ctx.Err() == nil {
			a.judgeConnectivity(ctx, hc, conn)
		}
	}
}
