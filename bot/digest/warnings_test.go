package digest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

// The proactive findings (a proxy CA about to expire, ignition sent
// through the proxy) are listed per cluster with the lint, make it
// non-compliant, and are followed like any finding: new when they
// appear, fixed when the CA is renewed.
func TestBuildProactiveWarnings(t *testing.T) {
	risky := hc(compliantNoProxy)
	risky.Proxy.TrustedCA = "corp-ca"
	risky.TrustedCA = &event.CABundle{ConfigMap: "corp-ca", Found: true, Certificates: 1, Subject: "Corp Root CA", NotAfter: t0.Add(12 * 24 * time.Hour)}
	risky.IgnitionEndpoint = "ignition-server-clusters-bad.apps.mgmt.example.com"
	renewed := risky
	renewed.TrustedCA = &event.CABundle{ConfigMap: "corp-ca", Found: true, Certificates: 2, Subject: "Corp Root CA", NotAfter: t0.Add(900 * 24 * time.Hour)}

	first := digest.Build(t0, digest.Input{Clients: goCurlRequests, Clusters: []digest.Cluster{
		{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
		{Key: keyBad, HostedCluster: risky},
	}})
	bad := report(t, first, keyBad)
	if c := codes(bad); !c[diagnose.WarnTrustedCAExpiring] || !c[diagnose.WarnIgnitionThroughProxy] || bad.Compliant() {
		t.Fatalf("codes %v compliant %v, want the CA expiry and ignition warnings", c, bad.Compliant())
	}
	if !report(t, first, keyGood).Compliant() {
		t.Error("the good cluster is not compliant")
	}
	var text string
	_, replies := digest.Render(first, "daily", digest.Full)
	for _, rp := range replies {
		text += sectionsText(rp.Blocks)
	}
	for _, want := range []string{"`trusted-ca-expiring`", "expires on 2026-12-13 (in 12 days)", "`ignition-through-proxy`",
		"fix: add ignition-server-clusters-bad.apps.mgmt.example.com to spec.configuration.proxy.noProxy"} {
		if !strings.Contains(text, want) {
			t.Errorf("digest lacks %q:\n%s", want, text)
		}
	}
	snap := first.Snapshot()
	second := digest.Build(t0.Add(24*time.Hour), digest.Input{Clients: goCurlRequests, Previous: &snap, Clusters: []digest.Cluster{
		{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
		{Key: keyBad, HostedCluster: renewed},
	}})
	bad = report(t, second, keyBad)
	if codes(bad)[diagnose.WarnTrustedCAExpiring] || !containsPrefix(bad.Fixed, diagnose.WarnTrustedCAExpiring) {
		t.Errorf("after renewal: codes %v fixed %v", codes(bad), bad.Fixed)
	}
	if second.Counts[noproxy.SeverityWarning] != 1 {
		t.Errorf("warnings %d, want 1 (ignition still proxied)", second.Counts[noproxy.SeverityWarning])
	}
}
