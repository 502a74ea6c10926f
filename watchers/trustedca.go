package watchers

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
)

// The proxy's trusted CA (spec.configuration.proxy.trustedCA.name) is a
// ConfigMap in the HostedCluster's namespace whose key ca-bundle.crt holds
// PEM certificates; HyperShift sets ValidProxyConfiguration=False
// (ProxyCABundleInvalid) when it is missing or a certificate expired. The
// agent states a summary of it in the HostedCluster's event (event.CABundle),
// never the PEM.
//
// The ConfigMaps come from one management informer, in all namespaces: the
// agent is not told which namespaces hold HostedClusters, and the
// ConfigMaps named by all of them are no one list (one informer per
// cluster with a metadata.name field selector, as for the kubeconfig
// Secret, would live and die with the leader's hosted watches, and a new
// term's first sync would not have the summaries yet; the management
// informers outlive terms). Its transform replaces every ConfigMap by a
// stub before it reaches the cache: name, namespace, resourceVersion and,
// for a ConfigMap holding ca-bundle.crt, the summary as an annotation. The
// PEM (and every other ConfigMap's data) is dropped as it is decoded, so
// it is never cached, logged or kept beyond the list or watch event that
// carried it, and a stub costs about 600 bytes of heap whatever the
// ConfigMap held (bench B4-configmaps).
//
// The summary lives ON the stub rather than in a side map keyed by
// namespace/name: the informer's cache then stays the one source of
// truth. A side map would have to be kept in step with it by hand (a
// relist that finds a ConfigMap gone reports it as a tombstone, a delete
// may race the sync that reads the map), while a stub comes and goes with
// the object, carries the resourceVersion the summary was made from, and
// is read through a lister like every other management object. The
// transform replaces the annotations, so a user cannot plant a summary by
// annotating a ConfigMap.

// CABundleKey is the key of the trusted CA ConfigMap HyperShift reads.
const CABundleKey = "ca-bundle.crt"

// caSummaryAnnotation holds, on a cached ConfigMap stub, the JSON of the
// event.CABundle summarising its ca-bundle.crt (absent: no such key).
const caSummaryAnnotation = "hcpbot.io/ca-bundle-summary"

// Problems of a trusted CA ConfigMap that exists (event.CABundle.Problem).
const (
	caProblemNoKey   = "no key " + CABundleKey
	caProblemEmpty   = "key " + CABundleKey + " is empty"
	caProblemNoCerts = "key " + CABundleKey + " holds no parsable PEM certificate"
)

// summarizeCABundle states what a ca-bundle.crt holds: the number of PEM
// certificates that parse and the one that expires first (its NotAfter and
// subject), or the Problem when none does. Found is true: the ConfigMap is
// there; ConfigMap (the name) is the caller's to set. Blocks that are not
// CERTIFICATE (a private key pasted by mistake) are skipped unread.
func summarizeCABundle(pemData string, present bool) event.CABundle {
	b := event.CABundle{Found: true}
	switch {
	case !present:
		b.Problem = caProblemNoKey
		return b
	case len(pemData) == 0:
		b.Problem = caProblemEmpty
		return b
	}
	rest := []byte(pemData)
	var first *x509.Certificate
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		b.Certificates++
		if first == nil || c.NotAfter.Before(first.NotAfter) {
			first = c
		}
	}
	if first == nil {
		b.Problem = caProblemNoCerts
		return b
	}
	b.NotAfter = first.NotAfter.UTC().Truncate(time.Second)
	b.Subject = first.Subject.CommonName
	if b.Subject == "" {
		b.Subject = first.Subject.String()
	}
	return b
}

// transformConfigMap replaces a ConfigMap by its stub (see above).
func transformConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.UID == "" {
		// Not a ConfigMap, or already a stub: the transform must be
		// idempotent, since client-go's watch-list (client-go 0.37)
		// transforms the initial objects in the reflector's temporary
		// store and again when it Replaces the FIFO's content with them.
		// Every object the API server returns has a UID; stubs have
		// none, so no ConfigMap can pass for one.
		return obj, nil
	}
	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: cm.Name, Namespace: cm.Namespace, ResourceVersion: cm.ResourceVersion,
	}}
	if pemData, present := cm.Data[CABundleKey]; present {
		// Only ConfigMaps holding the key are parsed; the others' stubs
		// say "no key" by having no summary.
		s, err := json.Marshal(summarizeCABundle(pemData, true))
		if err != nil {
			return nil, err
		}
		out.Annotations = map[string]string{caSummaryAnnotation: string(s)}
	}
	return out, nil
}

// configMapInformer lists every ConfigMap of the management cluster for
// the transform to reduce to stubs.
func configMapInformer(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	return coreinformers.NewConfigMapInformer(c, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// trustedCAIndex indexes HostedClusters by the namespace/name of the
// trusted CA ConfigMap their proxy names, so that a ConfigMap event finds
// the clusters to re-sync without decoding them all.
const trustedCAIndex = "trustedCA"

func trustedCAIndexFunc(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "trustedCA", "name")
	if name == "" {
		return nil, nil
	}
	return []string{u.GetNamespace() + "/" + name}, nil
}

// configMapHandler queues the HostedClusters that name the ConfigMap; as
// every handler, it only enqueues.
func (a *Agent) configMapHandler(hcIndex cache.Indexer) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		hcs, _ := hcIndex.ByIndex(trustedCAIndex, m.GetNamespace()+"/"+m.GetName())
		for _, o := range hcs {
			a.enqueueHosted(kindHostedCluster, event.ClusterRef{}, o)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
}

// trustedCA is what the agent read of the ConfigMap a HostedCluster's
// proxy names: the summary and the resourceVersion it was made from.
type trustedCA struct {
	bundle event.CABundle
	rv     string // "" when the ConfigMap was not found
}

// key is the trusted CA's part of the HostedCluster fact's transition key:
// a renewed bundle changes the payload, not the HostedCluster, and must
// not repeat the event ID of the bundle it replaces. A ConfigMap that is
// gone has no resourceVersion left to read; "absent" is what every agent
// sees. (So a ConfigMap deleted, re-created and deleted again while the
// HostedCluster is unchanged repeats the first deletion's ID, which the
// stream drops within its duplicate window; the periodic restatement
// states it again.)
func (t *trustedCA) key() string {
	if t == nil {
		return ""
	}
	if !t.bundle.Found {
		return ";trustedCA:absent"
	}
	return ";trustedCA:rv:" + t.rv
}

// readTrustedCA reads the summary of the trusted CA ConfigMap hc's proxy
// names from the cache: nil when it names none. err is a cache failure.
func readTrustedCA(l listerscorev1.ConfigMapLister, hc *hypershift.HostedCluster) (*trustedCA, error) {
	name := hc.Proxy().TrustedCA.Name
	if name == "" {
		return nil, nil
	}
	cm, err := l.ConfigMaps(hc.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return &trustedCA{bundle: event.CABundle{ConfigMap: name}}, nil
	}
	if err != nil {
		return nil, err
	}
	t := &trustedCA{rv: cm.ResourceVersion, bundle: event.CABundle{Found: true, Problem: caProblemNoKey}}
	if s, ok := cm.Annotations[caSummaryAnnotation]; ok {
		var b event.CABundle
		if err := json.Unmarshal([]byte(s), &b); err != nil {
			return nil, err
		}
		t.bundle = b
	}
	t.bundle.ConfigMap = name
	return t, nil
}
