package diagnose

import (
	"slices"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

// TestRiskyProxyChangeWorkloadFamilies: a proxy is added whose noProxy
// protects Go, curl and requests (the CIDR 10.0.0.0/18 of the service
// network, which also makes HyperShift's kube-apiserver-proxy bypass) but
// not urllib, which ignores CIDRs. With the default families the
// proxy-change warning names urllib; with [go, curl, requests] it does not
// fire; the families are chosen per cluster.
func TestRiskyProxyChangeWorkloadFamilies(t *testing.T) {
	const noProxy = "10.0.0.0/18,10.132.0.0/14,.svc,.cluster.local,localhost"
	hc := noProxyState()
	hc.ServiceNetwork = []string{"10.0.0.0/18"}
	facts := []fact{hcFact(t, hc, at(0)), changeFact(t, event.ProxySpec{}, proxySpec(noProxy), at(5))}
	withClients := func(f ClientsFunc) *Cluster {
		c := build(t, facts...)
		c.SetClients(f)
		return c
	}
	risky := func(c *Cluster) (Diagnosis, bool) {
		for _, d := range Diagnose(c, at(60)) {
			if d.Rule == RuleRiskyProxyChange {
				return d, true
			}
		}
		return Diagnosis{}, false
	}

	d, ok := risky(withClients(nil))
	if !ok {
		t.Fatal("default families (urllib among them): no risky-proxy-change warning")
	}
	if !strings.Contains(d.Title, "urllib") || strings.Contains(d.Title, "go,") || d.Fix == nil || !slices.Contains(d.Fix.Add, "10.0.0.1") || d.Trigger == nil {
		t.Errorf("warning = %q, fix %+v: want urllib named alone, the Service IP 10.0.0.1 added, the change as trigger", d.Title, d.Fix)
	}
	goCurlRequests := []noproxy.Client{noproxy.Go, noproxy.Curl, noproxy.Python}
	if d, ok := risky(withClients(func(Key, map[string]string) []noproxy.Client { return goCurlRequests })); ok {
		t.Errorf("families go, curl, requests: unexpected warning %q", d.Title)
	}
	// Per cluster: the function sees the cluster's key and labels.
	var seen Key
	perCluster := func(k Key, _ map[string]string) []noproxy.Client {
		seen = k
		if k.Cluster.Namespace == "other" {
			return nil
		}
		return goCurlRequests
	}
	if _, ok := risky(withClients(perCluster)); ok || seen != hcKey {
		t.Errorf("per-cluster families: warning %v, asked for %v (want none, for %v)", ok, seen, hcKey)
	}
	// Through the Model, for clusters created after SetClients too.
	m := NewModel()
	m.SetClients(func(Key, map[string]string) []noproxy.Client { return goCurlRequests })
	for _, f := range facts {
		m.ApplyDecoded(f.e, f.p)
	}
	if _, ok := risky(m.Cluster(hcKey)); ok {
		t.Error("Model.SetClients did not reach the cluster")
	}
}

// The workloads' verdict is remembered per (Service IP, noProxy, families):
// asked again it is the same answer without re-judging, and any of the
// three changing is judged anew.
func TestProxiedFamiliesMemo(t *testing.T) {
	c := NewCluster(Key{Source: "m", Cluster: event.ClusterRef{Namespace: "ns", Name: "hc"}})
	all := []noproxy.Client{noproxy.Go, noproxy.Urllib}
	first := c.familiesThrough("172.31.0.1", ".svc", all)
	if want := proxiedFamiliesOf("172.31.0.1", ".svc", all); !slices.Equal(first, want) || len(first) == 0 {
		t.Fatalf("families %v, want %v (non-empty)", first, want)
	}
	if again := c.familiesThrough("172.31.0.1", ".svc", all); &again[0] != &first[0] {
		t.Error("asked again, the verdict was judged anew")
	}
	for _, tc := range []struct {
		ip, noProxy string
		clients     []noproxy.Client
	}{
		{"172.31.0.1", ".svc,172.31.0.1", all},
		{"10.0.0.1", ".svc", all},
		{"172.31.0.1", ".svc", all[:1]},
	} {
		if got, want := c.familiesThrough(tc.ip, tc.noProxy, tc.clients), proxiedFamiliesOf(tc.ip, tc.noProxy, tc.clients); !slices.Equal(got, want) {
			t.Errorf("familiesThrough(%s, %q, %v) = %v, want %v", tc.ip, tc.noProxy, tc.clients, got, want)
		}
	}
}
