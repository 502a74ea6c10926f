package digest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/golden"
	"github.com/hcpbot/hcpbot/noproxy"
)

// Every finding code the digest shows is classified on purpose: what
// breaks or will break (or leaks the proxy's password) needs action,
// coverage gaps as their severity says (info: HyperShift adds the entry
// by itself), client-family dialects and repetitions are informational.
func TestClassify(t *testing.T) {
	const need, info = digest.NeedsAction, digest.Informational
	for _, tc := range []struct {
		code string
		sev  noproxy.Severity
		want digest.Class
	}{
		{noproxy.CodeMissingKubernetes, noproxy.SeverityCritical, need}, // API traffic tunnelled (seed 000)
		{noproxy.CodeMissingKubernetes, noproxy.SeverityWarning, need},  // release unknown: may tunnel
		{noproxy.CodeMissingKubernetes, noproxy.SeverityInfo, info},     // the kube-apiserver-proxy goes direct already
		{noproxy.CodeMissingServiceCIDR, noproxy.SeverityCritical, need},
		{noproxy.CodeMissingServiceCIDR, noproxy.SeverityInfo, info}, // HyperShift adds it
		{noproxy.CodeMissingClusterCIDR, noproxy.SeverityWarning, need},
		{noproxy.CodeMissingClusterCIDR, noproxy.SeverityInfo, info},
		{noproxy.CodeMissingMachineCIDR, noproxy.SeverityInfo, info},
		{noproxy.CodeMissingLocalhost, noproxy.SeverityWarning, need},
		{noproxy.CodeMissingSvc, noproxy.SeverityInfo, info},
		{noproxy.CodeMissingClusterLocal, noproxy.SeverityInfo, info},
		{noproxy.CodeMissingKubernetesDefaultSvc, noproxy.SeverityWarning, need},
		{noproxy.CodeInvalidProxyURL, noproxy.SeverityCritical, need},
		{noproxy.CodeProxySchemeNotHTTP, noproxy.SeverityCritical, need},
		{noproxy.CodeHTTPSProxyWithoutTrustedCA, noproxy.SeverityWarning, need},
		{noproxy.CodeCredentialsInProxyURL, noproxy.SeverityWarning, need},
		{noproxy.CodeWildcardDisablesProxy, noproxy.SeverityWarning, need},
		{noproxy.CodeUnmatchableEntry, noproxy.SeverityWarning, need},
		{noproxy.CodeAmbiguousEntry, noproxy.SeverityWarning, need},
		{noproxy.CodeDuplicateEntry, noproxy.SeverityInfo, info},
		{noproxy.CodeIgnoredByClients, noproxy.SeverityWarning, info}, // a CIDR urllib cannot read
		{noproxy.CodeListForAllClients, noproxy.SeverityInfo, info},
		{diagnose.WarnTrustedCAMissing, noproxy.SeverityCritical, need},
		{diagnose.WarnTrustedCAUnusable, noproxy.SeverityCritical, need},
		{diagnose.WarnTrustedCAExpired, noproxy.SeverityCritical, need},
		{diagnose.WarnTrustedCAExpiring, noproxy.SeverityWarning, need},
		{diagnose.WarnIgnitionThroughProxy, noproxy.SeverityWarning, need},
		{diagnose.WarnKonnectivityThrough, noproxy.SeverityWarning, need},
		{"a-future-lint", noproxy.SeverityWarning, need}, // unknown: by severity
		{"a-future-lint", noproxy.SeverityInfo, info},
	} {
		if got := digest.Classify(noproxy.Finding{Code: tc.code, Severity: tc.sev}); got != tc.want {
			t.Errorf("%s (%s): %s, want %s", tc.code, tc.sev, got, tc.want)
		}
	}
}

// A cluster whose noProxy is right for the platform's clients, judged by
// the default families (urllib among them, which ignores CIDRs), has
// warnings that need no action: it is compliant, the root says what
// compliant means, and Slack gets no reply for it; the console lists its
// findings as informational.
func TestCompliantMeansNothingNeedsAction(t *testing.T) {
	d := digest.Build(t0, digest.Input{Clusters: []digest.Cluster{{Key: keyGood, HostedCluster: hc(compliantNoProxy)}}})
	good := report(t, d, keyGood)
	if !good.Compliant() || good.NeedingAction() != 0 || !slices.ContainsFunc(good.Findings, func(f digest.Finding) bool {
		return f.Code == noproxy.CodeIgnoredByClients && f.Severity == noproxy.SeverityWarning && f.Class == digest.Informational
	}) {
		t.Fatalf("findings %+v: want ignored-by-some-clients warnings, informational, and the cluster compliant", good.Findings)
	}
	if d.Counts[noproxy.SeverityWarning] == 0 || d.Action[noproxy.SeverityWarning] != 0 || d.Informational != len(good.Findings) {
		t.Errorf("counts %v, need action %v, informational %d", d.Counts, d.Action, d.Informational)
	}
	root, replies := digest.Render(d, "daily", digest.Compact)
	summary := sectionsText(root.Blocks)
	for _, want := range []string{"1 hosted cluster: 0 need action, 1 compliant", digest.CompliantLine, "• *mgmt-1*: 1 clusters, all compliant"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	if strings.Contains(summary, "*Needs action*") || len(replies) != 0 {
		t.Errorf("a compliant cluster listed under needs action or replied to (%d replies):\n%s", len(replies), summary)
	}
	_, full := digest.Render(d, "daily", digest.Full)
	if len(full) != 1 {
		t.Fatalf("%d console replies, want the cluster's", len(full))
	}
	if c := text(full[0]); !strings.Contains(c, "✅ compliant") || !strings.Contains(c, "*Informational*\n🔵 `ignored-by-some-clients`") || strings.Contains(c, "*Needs action*") {
		t.Errorf("console reply:\n%s", c)
	}
}

// What needs action is ranked: most severe first, then clusters with an
// open incident, then the oldest (first seen in an earlier digest), in
// the Build result and in the rendered root, within Block Kit's limits.
func TestNeedsActionRanked(t *testing.T) {
	key := func(name string) diagnose.Key {
		return diagnose.Key{Source: "mgmt-1", Cluster: event.ClusterRef{Namespace: "clusters", Name: name}}
	}
	withProxy := func(url string) event.HostedClusterState {
		s := hc(compliantNoProxy)
		s.Proxy.HTTPSProxy = url
		return s
	}
	httpsNoCA := withProxy("https://proxy.corp.example:3443")
	old := digest.Cluster{Key: key("old"), HostedCluster: httpsNoCA}
	first := digest.Build(t0.Add(-10*24*time.Hour), digest.Input{Clients: goCurlRequests, Clusters: []digest.Cluster{old}})
	snap := first.Snapshot()
	d := digest.Build(t0, digest.Input{Clients: goCurlRequests, Previous: &snap, Clusters: []digest.Cluster{
		{Key: key("newer"), HostedCluster: httpsNoCA},
		old,
		{Key: key("hurting"), HostedCluster: withProxy("http://user:s3cret@proxy.corp.example:3128"), Incident: "inc-hurting", IncidentTitle: "nodes NotReady"},
		{Key: key("tunnel"), HostedCluster: hc(".corp.example")},
		{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
	}})
	var got []string
	for _, it := range d.NeedsAction() {
		got = append(got, it.Key.Cluster.Name+":"+it.Finding.Code)
	}
	want := []string{
		"tunnel:" + noproxy.CodeMissingKubernetes,         // critical
		"hurting:" + noproxy.CodeCredentialsInProxyURL,    // warning, open incident
		"old:" + noproxy.CodeHTTPSProxyWithoutTrustedCA,   // warning, seen 10 days ago
		"newer:" + noproxy.CodeHTTPSProxyWithoutTrustedCA, // warning, new
	}
	if !slices.Equal(got, want) {
		t.Fatalf("needs action %v, want %v", got, want)
	}
	root, _ := digest.Render(d, "daily", digest.Compact)
	summary := sectionsText(root.Blocks)
	for i, line := range []string{
		"1. 🔴 `clusters/tunnel` on mgmt-1: `missing-kubernetes` (`kubernetes`) 🆕",
		"2. 🟠 `clusters/hurting` on mgmt-1: `credentials-in-proxy-url`",
		"3. 🟠 `clusters/old` on mgmt-1: `https-proxy-scheme-without-trusted-ca` (`https://proxy.corp.example:3443`) · since 2026-11-21",
		"4. 🟠 `clusters/newer` on mgmt-1: `https-proxy-scheme-without-trusted-ca` (`https://proxy.corp.example:3443`) 🆕",
	} {
		if !strings.Contains(summary, line) {
			t.Errorf("line %d missing: %q\n%s", i+1, line, summary)
		}
	}
	if !strings.Contains(summary, "5 hosted clusters: 4 need action, 1 compliant") || strings.Contains(summary, "s3cret") {
		t.Errorf("summary:\n%s", summary)
	}
	golden.BlockKit(t, "digest-ranked-root", root.Text, root.Blocks)
}

// A finding's first sighting is kept from digest to digest; a snapshot
// written before first sightings were kept dates them to its own time.
func TestSinceCarriedAcrossDigests(t *testing.T) {
	in := digest.Input{Clients: goCurlRequests, Clusters: []digest.Cluster{{Key: keyBad, HostedCluster: hc(".corp.example")}}}
	sinceOf := func(d digest.Digest) time.Time {
		for _, f := range report(t, d, keyBad).Findings {
			if f.Code == noproxy.CodeMissingKubernetes {
				return f.Since
			}
		}
		t.Fatal("no missing-kubernetes finding")
		return time.Time{}
	}
	d := digest.Build(t0, in)
	for i := 1; i <= 2; i++ {
		snap := d.Snapshot()
		in.Previous = &snap
		d = digest.Build(t0.Add(time.Duration(i)*24*time.Hour), in)
		if got := sinceOf(d); !got.Equal(t0) {
			t.Errorf("digest %d: since %v, want the first digest's %v", i+1, got, t0)
		}
	}
	legacy := d.Snapshot()
	legacy.Since = nil
	in.Previous = &legacy
	if got := sinceOf(digest.Build(t0.Add(72*time.Hour), in)); !got.Equal(legacy.At) {
		t.Errorf("from a snapshot without first sightings: since %v, want its time %v", got, legacy.At)
	}
}
