package diagnose_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

func TestWarnings(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	proxy := event.ProxySpec{HTTPProxy: "http://proxy.corp.example:3128", HTTPSProxy: "http://proxy.corp.example:3128",
		NoProxy: "kubernetes,.svc,172.31.0.0/16,10.132.0.0/14", TrustedCA: "corp-ca"}
	bundle := func(notAfter time.Time) *event.CABundle {
		return &event.CABundle{ConfigMap: "corp-ca", Found: true, Certificates: 2, NotAfter: notAfter, Subject: "Corp Root CA"}
	}
	for _, tc := range []struct {
		name string
		hc   event.HostedClusterState
		want map[string]noproxy.Severity // code → severity
		text string                      // in some Reason
	}{
		{name: "endpoints through the proxy, CA fine", hc: event.HostedClusterState{Proxy: proxy, TrustedCA: bundle(now.Add(400 * 24 * time.Hour)),
			IgnitionEndpoint: "ignition-server-clusters-example.apps.mgmt.example.com", KonnectivityEndpoint: "192.168.126.10:30551"},
			want: map[string]noproxy.Severity{diagnose.WarnIgnitionThroughProxy: noproxy.SeverityWarning, diagnose.WarnKonnectivityThrough: noproxy.SeverityWarning}},
		{name: "endpoints bypassed", hc: event.HostedClusterState{Proxy: withNoProxy(proxy, proxy.NoProxy+",.apps.mgmt.example.com,192.168.126.0/24"),
			IgnitionEndpoint: "ignition-server-clusters-example.apps.mgmt.example.com", KonnectivityEndpoint: "192.168.126.10:30551"},
			want: map[string]noproxy.Severity{}},
		{name: "no https proxy: nothing proxied", hc: event.HostedClusterState{IgnitionEndpoint: "ignition.example.com"}, want: map[string]noproxy.Severity{}},
		{name: "CA expires in 10 days", hc: event.HostedClusterState{Proxy: proxy, TrustedCA: bundle(now.Add(10 * 24 * time.Hour))},
			want: map[string]noproxy.Severity{diagnose.WarnTrustedCAExpiring: noproxy.SeverityWarning}, text: "expires on 2026-12-15 (in 10 days)"},
		{name: "CA expires in 31 days", hc: event.HostedClusterState{Proxy: proxy, TrustedCA: bundle(now.Add(31 * 24 * time.Hour))},
			want: map[string]noproxy.Severity{}},
		{name: "CA expired", hc: event.HostedClusterState{Proxy: proxy, TrustedCA: bundle(now.Add(-time.Hour))},
			want: map[string]noproxy.Severity{diagnose.WarnTrustedCAExpired: noproxy.SeverityCritical}, text: `"Corp Root CA"`},
		{name: "CA ConfigMap missing", hc: event.HostedClusterState{Proxy: proxy, TrustedCA: &event.CABundle{ConfigMap: "corp-ca"}},
			want: map[string]noproxy.Severity{diagnose.WarnTrustedCAMissing: noproxy.SeverityCritical}},
		{name: "CA bundle unusable", hc: event.HostedClusterState{Proxy: proxy, TrustedCA: &event.CABundle{ConfigMap: "corp-ca", Found: true, Problem: "key ca-bundle.crt holds no PEM certificate"}},
			want: map[string]noproxy.Severity{diagnose.WarnTrustedCAUnusable: noproxy.SeverityCritical}, text: "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := diagnose.Warnings(tc.hc, now)
			have := map[string]noproxy.Severity{}
			var reasons []string
			for _, f := range got {
				have[f.Code] = f.Severity
				reasons = append(reasons, f.Reason)
				if f.Fix == "" {
					t.Errorf("%s has no fix", f.Code)
				}
			}
			if len(have) != len(tc.want) {
				t.Fatalf("warnings %v, want %v", have, tc.want)
			}
			for code, sev := range tc.want {
				if have[code] != sev {
					t.Errorf("%s: severity %q, want %q (all: %v)", code, have[code], sev, have)
				}
			}
			if tc.text != "" && !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, tc.text) }) {
				t.Errorf("no reason mentions %q: %q", tc.text, reasons)
			}
		})
	}
}

// The fix names the host to add, without the port.
func TestWarningsFixNamesHost(t *testing.T) {
	hc := event.HostedClusterState{Proxy: event.ProxySpec{HTTPSProxy: "http://proxy.corp.example:3128", NoProxy: "kubernetes"},
		KonnectivityEndpoint: "192.168.126.10:30551"}
	got := diagnose.Warnings(hc, time.Now())
	if len(got) != 1 || got[0].Fix != "add 192.168.126.10 to spec.configuration.proxy.noProxy" || got[0].Entry != "192.168.126.10:30551" {
		t.Fatalf("Warnings = %+v", got)
	}
}

func withNoProxy(p event.ProxySpec, noProxy string) event.ProxySpec { p.NoProxy = noProxy; return p }
