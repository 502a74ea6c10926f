package diagnose

import (
	"slices"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/noproxy"
)

// A noProxy edit that stops bypassing the ignition endpoint (new workers
// boot from it) or the konnectivity server warns at once, before any
// worker boots, and proposes the entries that bypass them. An edit that
// keeps them bypassed does not; neither does a cluster that was created
// that way (the digest's Warnings report that one).
func TestRiskyProxyChangeIgnitionKonnectivity(t *testing.T) {
	const safe = "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,172.31.0.0/16,10.132.0.0/14"
	hc := seedHC(safe + ",.apps.mgmt.example.com,192.168.126.0/24")
	hc.Version = "4.21.3"
	hc.IgnitionEndpoint = "ignition-server-clusters-example.apps.mgmt.example.com"
	hc.KonnectivityEndpoint = "192.168.126.10:30551"
	edited := hc
	edited.Proxy.NoProxy = safe
	goOnly := func(c *Cluster) *Cluster {
		// The workload families are another warning's business.
		c.SetClients(func(Key, map[string]string) []noproxy.Client { return []noproxy.Client{noproxy.Go} })
		return c
	}
	risky := func(c *Cluster) (Diagnosis, bool) { return find(Diagnose(goOnly(c), at(60)), RuleRiskyProxyChange) }

	d, ok := risky(build(t, hcFact(t, hc, at(0)), changeFact(t, hc.Proxy, edited.Proxy, at(5)), hcFact(t, edited, at(5))))
	if !ok {
		t.Fatal("no warning for an edit that proxies ignition and konnectivity")
	}
	if !strings.Contains(d.Title, "ignition and konnectivity through the proxy") || d.Severity != SeverityWarning || d.Trigger == nil {
		t.Errorf("title %q severity %s trigger %v", d.Title, d.Severity, d.Trigger)
	}
	if d.Fix == nil || !slices.Equal(d.Fix.Add, []string{"ignition-server-clusters-example.apps.mgmt.example.com", "192.168.126.10"}) {
		t.Errorf("fix %+v, want the two hosts added", d.Fix)
	}
	if n := strings.Count(d.RootCause, ". "); n > 1 {
		t.Errorf("root cause of %d sentences: %s", n+1, d.RootCause)
	}
	// Only konnectivity proxied.
	half := edited
	half.Proxy.NoProxy = safe + ",.apps.mgmt.example.com"
	d, ok = risky(build(t, hcFact(t, hc, at(0)), changeFact(t, hc.Proxy, half.Proxy, at(5)), hcFact(t, half, at(5))))
	if !ok || strings.Contains(d.Title, "ignition") || d.Fix == nil || !slices.Equal(d.Fix.Add, []string{"192.168.126.10"}) {
		t.Errorf("konnectivity only: ok %v title %q fix %+v", ok, d.Title, d.Fix)
	}
	// An edit that keeps both bypassed.
	kept := hc
	kept.Proxy.NoProxy = hc.Proxy.NoProxy + ",.corp.example"
	if d, ok := risky(build(t, hcFact(t, hc, at(0)), changeFact(t, hc.Proxy, kept.Proxy, at(5)), hcFact(t, kept, at(5)))); ok {
		t.Errorf("harmless edit warned: %q", d.Title)
	}
	// Created that way: no edit to blame.
	if d, ok := risky(build(t, hcFact(t, edited, at(0)))); ok {
		t.Errorf("no edit, yet warned: %q", d.Title)
	}
	if ws := Warnings(edited, at(60)); len(ws) != 2 {
		t.Errorf("Warnings of the created-that-way cluster: %+v, want ignition and konnectivity", ws)
	}
}
