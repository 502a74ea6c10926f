package diagnose

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

const (
	nodeA = "example-np1-a"
	nodeB = "example-np1-b"
	nodeC = "example-np1-c"
)

// The seed's symptoms, after the proxy spec took effect at minute 5.
func seedSymptoms(t *testing.T) []fact {
	return []fact{
		nodeFact(t, nodeA, event.ConditionUnknown, at(20), at(21)),
		nodeFact(t, nodeB, event.ConditionFalse, at(22), at(22)),
		nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1)),
		seedCrash(t, at(25)),
		apiProxyFact(t, nodeA, event.ProxyModeTunnel, true, at(23)),
		poolFact(t, "np1", false, at(24), at(24)),
	}
}

func TestProxyTunnel(t *testing.T) {
	tunnel := hcFact(t, seedHC(tunnelNoProxy), at(5))
	tests := []struct {
		name     string
		facts    []fact
		rules    []string
		level    Level    // of the first diagnosis
		symptoms []string // of the first diagnosis, when set
	}{
		{
			name:  "seed: signature, nodes, NodePool, CONNECT failure",
			facts: append([]fact{tunnel}, seedSymptoms(t)...),
			rules: []string{RuleProxyTunnel},
			level: ConfidenceHigh,
			symptoms: []string{
				"node/" + nodeA, "node/" + nodeB, "nodepool/clusters/np1",
				"pod/kube-system/kube-apiserver-proxy-" + nodeA, "pod/" + scaNamespace + "/" + scaPod, "proxy/clusters/example",
			},
		},
		{
			name:  "operator signature alone is one kind: medium",
			facts: []fact{tunnel, seedCrash(t, at(25))},
			rules: []string{RuleProxyTunnel}, level: ConfidenceMedium,
			symptoms: []string{"pod/" + scaNamespace + "/" + scaPod, "proxy/clusters/example"},
		},
		{
			name:  "NotReady nodes alone: medium",
			facts: []fact{tunnel, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20))},
			rules: []string{RuleProxyTunnel}, level: ConfidenceMedium,
		},
		{
			name:  "nodes and NodePool, no signature or CONNECT failure: medium",
			facts: []fact{tunnel, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), poolFact(t, "np1", false, at(21), at(21))},
			rules: []string{RuleProxyTunnel}, level: ConfidenceMedium,
		},
		{
			name:  "nodes and CONNECT failure: high",
			facts: []fact{tunnel, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), apiProxyFact(t, nodeA, event.ProxyModeTunnel, true, at(21))},
			rules: []string{RuleProxyTunnel}, level: ConfidenceHigh,
		},
		{
			name: "every observed kube-apiserver-proxy is direct: low",
			facts: []fact{tunnel, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), seedCrash(t, at(25)),
				apiProxyFact(t, nodeB, event.ProxyModeHAProxy, false, at(21))},
			rules: []string{RuleProxyTunnel}, level: ConfidenceLow,
		},
		{
			name:  "tunnel spec without symptoms and without a known edit: nothing",
			facts: []fact{tunnel, nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1))},
			rules: []string{},
		},
		{
			name:  "a tunnel-mode pod without failures is no symptom",
			facts: []fact{tunnel, apiProxyFact(t, nodeA, event.ProxyModeTunnel, false, at(21))},
			rules: []string{},
		},
		{
			name:  "noProxy with kubernetes bypasses: nodes-notready and operator-crashloop instead",
			facts: append([]fact{hcFact(t, seedHC(".corp.example,kubernetes"), at(5))}, seedSymptomsNoTunnel(t)...),
			rules: []string{RuleNodesNotReady, RuleOperatorCrashLoop}, level: ConfidenceMedium,
		},
		{
			name:  "seed noProxy as given lists the service network, which both rules take as a bypass",
			facts: append([]fact{hcFact(t, seedHC(seedNoProxy), at(5))}, seedSymptomsNoTunnel(t)...),
			rules: []string{RuleNodesNotReady, RuleOperatorCrashLoop}, level: ConfidenceMedium,
		},
		{
			name:  "no httpsProxy",
			facts: append([]fact{hcFact(t, noProxyState(), at(5))}, seedSymptomsNoTunnel(t)...),
			rules: []string{RuleNodesNotReady, RuleOperatorCrashLoop}, level: ConfidenceMedium,
		},
		{
			name:  "deleted HostedCluster: nothing",
			facts: append(append([]fact{tunnel}, seedSymptoms(t)...), hcFact(t, func() event.HostedClusterState { s := seedHC(tunnelNoProxy); s.Deleted = true; return s }(), at(30))),
			rules: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := Diagnose(build(t, tt.facts...), at(60))
			if got := rulesOf(ds); !slices.Equal(got, tt.rules) {
				t.Fatalf("rules = %v, want %v\n%s", got, tt.rules, render(ds))
			}
			if len(ds) == 0 {
				return
			}
			if ds[0].Confidence.Level != tt.level {
				t.Errorf("confidence = %s (%s), want %s", ds[0].Confidence.Level, ds[0].Confidence.Why, tt.level)
			}
			if tt.symptoms != nil && !slices.Equal(ds[0].Symptoms, tt.symptoms) {
				t.Errorf("symptoms = %q, want %q", ds[0].Symptoms, tt.symptoms)
			}
		})
	}
}

// seedSymptomsNoTunnel are the seed's symptoms on a cluster whose workers
// run direct HAProxy.
func seedSymptomsNoTunnel(t *testing.T) []fact {
	return []fact{
		nodeFact(t, nodeA, event.ConditionUnknown, at(20), at(21)),
		nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1)),
		seedCrash(t, at(25)),
		apiProxyFact(t, nodeA, event.ProxyModeHAProxy, false, at(23)),
	}
}

// TestProxyTunnelSeedDiagnosis pins the whole seed diagnosis: fix, diff,
// evidence order, text that names the rule and the symptoms.
func TestProxyTunnelSeedDiagnosis(t *testing.T) {
	c := build(t, append([]fact{hcFact(t, seedHC(tunnelNoProxy), at(5))}, seedSymptoms(t)...)...)
	ds := Diagnose(c, at(60))
	if len(ds) != 1 {
		t.Fatalf("want one diagnosis\n%s", render(ds))
	}
	d := ds[0]
	if d.Severity != SeverityCritical || d.Title != "API traffic of clusters/example on mgmt-east is tunnelled through the HTTPS proxy" {
		t.Errorf("severity %s, title %q", d.Severity, d.Title)
	}
	wantFix := &Fix{
		Kind: "noproxy", Target: "HostedCluster/clusters/example",
		Before: ".corp.example", After: ".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14",
		Add: []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"},
		Diff: "--- spec.configuration.proxy.noProxy (before)\n+++ spec.configuration.proxy.noProxy (after)\n" +
			"  .corp.example\n+ kubernetes\n+ 172.31.0.0/16\n+ 10.132.0.0/14\n",
	}
	if !reflect.DeepEqual(d.Fix, wantFix) {
		t.Errorf("fix = %#v\nwant %#v", d.Fix, wantFix)
	}
	for _, want := range []string{
		`spec noProxy ".corp.example"`, "HyperShift 4.18.12 applies the 4.14–4.22 rule",
		`contains none of "kubernetes", the service network 172.31.0.0/16, the cluster network 10.132.0.0/14`,
		"tunnels API traffic through the proxy with HTTP CONNECT",
		"fails checking apiserver connectivity", "2 of 3 nodes are NotReady", "AllNodesHealthy=False", "CONNECT through the proxy fails",
	} {
		if !strings.Contains(d.RootCause, want) {
			t.Errorf("root cause lacks %q:\n%s", want, d.RootCause)
		}
	}
	var kinds []string
	for i, e := range d.Evidence {
		kinds = append(kinds, e.Kind)
		if i > 0 && compareEvidence(d.Evidence[i-1], e) > 0 {
			t.Errorf("evidence not sorted at %d", i)
		}
		if e.At.IsZero() {
			t.Errorf("evidence without time: %+v", e)
		}
	}
	if want := []string{"proxy-spec", "node", "node", "apiserver-proxy", "crashloop", "nodepool"}; !slices.Equal(kinds, want) {
		t.Errorf("evidence kinds = %v, want %v\n%s", kinds, want, render(ds))
	}
	crash := d.Evidence[4]
	if !strings.Contains(crash.Text, seedMessage) || !crash.At.Equal(at(24)) {
		t.Errorf("crash evidence = %+v, want the seed line at its FinishedAt", crash)
	}
	if d.Trigger != nil {
		t.Errorf("no proxy change was seen, trigger = %+v", d.Trigger)
	}
	if len(d.NextSteps) == 0 || !strings.Contains(d.NextSteps[0], `oc patch hostedcluster -n clusters example --type=merge -p '{"spec":{"configuration":{"proxy":{"noProxy":".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14"}}}}'`) {
		t.Errorf("next steps = %q", d.NextSteps)
	}
}

// TestSeedFix asserts what noproxy.Missing and Merge make of the seed
// values: the fix the brief expects, even though this spec does not tunnel.
func TestSeedFix(t *testing.T) {
	tests := []struct {
		noProxy, after string
		add            []string
		diff           string
	}{
		{
			noProxy: seedNoProxy, after: ".corp.example,172.31.0.0/16,kubernetes,10.132.0.0/14",
			add:  []string{"kubernetes", "10.132.0.0/14"},
			diff: "  .corp.example\n  172.31.0.0/16\n+ kubernetes\n+ 10.132.0.0/14\n",
		},
		{
			noProxy: tunnelNoProxy, after: ".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14",
			add:  []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"},
			diff: "  .corp.example\n+ kubernetes\n+ 172.31.0.0/16\n+ 10.132.0.0/14\n",
		},
		{
			// Merge drops the blank and the repeated entry: the diff shows it.
			noProxy: " .corp.example, ,.CORP.example,172.31.0.0/16", after: ".corp.example,172.31.0.0/16,kubernetes,10.132.0.0/14",
			add:  []string{"kubernetes", "10.132.0.0/14"},
			diff: "  .corp.example\n- .CORP.example\n  172.31.0.0/16\n+ kubernetes\n+ 10.132.0.0/14\n",
		},
		{
			// "*" satisfies Go (Missing adds nothing) but not the 4.14–4.22
			// substring search: kubernetes is added anyway.
			noProxy: "*", after: "*,kubernetes",
			add:  []string{"kubernetes"},
			diff: "  *\n+ kubernetes\n",
		},
	}
	for _, tt := range tests {
		f := noProxyFix("HostedCluster/clusters/example", "noProxy", proxySpec(tt.noProxy), seedHC(tt.noProxy))
		if f == nil {
			t.Errorf("%q: no fix", tt.noProxy)
			continue
		}
		if f.After != tt.after || !slices.Equal(f.Add, tt.add) {
			t.Errorf("%q: after %q add %q, want %q %q", tt.noProxy, f.After, f.Add, tt.after, tt.add)
		}
		if want := "--- noProxy (before)\n+++ noProxy (after)\n" + tt.diff; f.Diff != want {
			t.Errorf("%q: diff\n%s\nwant\n%s", tt.noProxy, f.Diff, want)
		}
		in := hyperShiftInput(seedHC(""), f.After)
		if !noproxy.HyperShiftBypass(noproxy.Recent, in) || !noproxy.HyperShiftBypass(noproxy.Legacy, in) {
			t.Errorf("%q: the fix %q does not bypass under both rules", tt.noProxy, f.After)
		}
	}
	// The brief's "seed" values bypass under both rules as they are.
	in := hyperShiftInput(seedHC(""), seedNoProxy)
	if !noproxy.HyperShiftBypass(noproxy.Recent, in) || !noproxy.HyperShiftBypass(noproxy.Legacy, in) {
		t.Errorf("%q was expected to bypass: an entry equals the service network", seedNoProxy)
	}
}

// TestReleaseDivergence: noProxy values the two HyperShift rules read
// differently (cases of noproxy's TestHyperShiftBypass applied to the seed
// networks). The release decides; an unknown release is at risk when
// either rule tunnels, and says so.
func TestReleaseDivergence(t *testing.T) {
	const apiName = "api-example.apps.mgmt.corp.example"
	tests := []struct {
		name     string
		state    event.HostedClusterState
		tunnel   bool
		level    Level
		contains string
	}{
		// ".corp.example" covers the API host name for Go (recent) but is
		// no substring of it (legacy).
		{"suffix entry, 4.18: legacy tunnels", withVersion(withEndpoint(seedHC(".corp.example"), apiName, 443), "4.18.12"), true, ConfidenceMedium, "4.14–4.22 rule"},
		{"suffix entry, 4.23: recent bypasses", withVersion(withEndpoint(seedHC(".corp.example"), apiName, 443), "4.23.1"), false, ConfidenceMedium, `Go's NO_PROXY matching exempts the API address`},
		{"suffix entry, unknown release: at risk", withVersion(withEndpoint(seedHC(".corp.example"), apiName, 443), ""), true, ConfidenceMedium, "The HyperShift release is unknown, so both rules were applied"},
		// "172.20.0.10" contains the text "172.20.0.1" (legacy) but is
		// another address (recent).
		{"address typo, 4.18: legacy bypasses", withVersion(seedHC("172.20.0.10,.corp.example"), "4.18.12"), false, ConfidenceMedium, `contains "172.20.0.1"`},
		{"address typo, 4.23: recent tunnels", withVersion(seedHC("172.20.0.10,.corp.example"), "4.23.1"), true, ConfidenceMedium, "HyperShift 4.23.1 applies the recent rule"},
		{"address typo, unknown release: at risk", withVersion(seedHC("172.20.0.10,.corp.example"), ""), true, ConfidenceMedium, "at least one of them tunnels"},
		// A covering CIDR exempts 172.20.0.1 for Go only.
		{"covering CIDR, 4.18: legacy tunnels", withVersion(seedHC("172.16.0.0/12,.corp.example"), "4.18.12"), true, ConfidenceMedium, "4.14–4.22 rule"},
		{"covering CIDR, 4.23: recent bypasses", withVersion(seedHC("172.16.0.0/12,.corp.example"), "4.23.1"), false, ConfidenceMedium, "bypasses the proxy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Signature and nodes: two kinds, so high unless the model is
			// unsure.
			c := build(t, hcFact(t, tt.state, at(5)), nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), seedCrash(t, at(25)))
			ds := Diagnose(c, at(60))
			d, fired := find(ds, RuleProxyTunnel)
			if fired != tt.tunnel {
				t.Fatalf("proxy-tunnel fired = %v, want %v\n%s", fired, tt.tunnel, render(ds))
			}
			if !fired {
				d, _ = find(ds, RuleNodesNotReady)
			}
			if !strings.Contains(d.RootCause, tt.contains) {
				t.Errorf("root cause lacks %q:\n%s", tt.contains, d.RootCause)
			}
			if fired && tt.state.Version != "" && d.Confidence.Level != ConfidenceHigh {
				t.Errorf("known release: confidence %s (%s), want high", d.Confidence.Level, d.Confidence.Why)
			}
			if fired && tt.state.Version == "" && d.Confidence.Level != tt.level {
				t.Errorf("unknown release: confidence %s (%s), want %s", d.Confidence.Level, d.Confidence.Why, tt.level)
			}
		})
	}

	// An observed tunnel-mode pod settles what the model could not.
	c := build(t, hcFact(t, withVersion(seedHC("172.20.0.10,.corp.example"), ""), at(5)),
		nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), seedCrash(t, at(25)),
		apiProxyFact(t, nodeA, event.ProxyModeTunnel, false, at(21)))
	if d, _ := find(Diagnose(c, at(60)), RuleProxyTunnel); d.Confidence.Level != ConfidenceHigh {
		t.Errorf("with a tunnel pod observed: confidence %s (%s), want high", d.Confidence.Level, d.Confidence.Why)
	}
}

func TestRiskyProxyChange(t *testing.T) {
	hc0 := hcFact(t, seedHC(seedNoProxy), at(0))
	removeBypass := changeFact(t, proxySpec(seedNoProxy), proxySpec(tunnelNoProxy), at(5))
	hc5 := hcFact(t, seedHC(tunnelNoProxy), at(5))
	tests := []struct {
		name    string
		facts   []fact
		rules   []string
		trigger *fact // the change named as the trigger of the first diagnosis
	}{
		{"edit removes the bypass: warning at once", []fact{hc0, removeBypass, hc5}, []string{RuleRiskyProxyChange}, &removeBypass},
		{"the change is newer than the HostedCluster state", []fact{hc0, removeBypass}, []string{RuleRiskyProxyChange}, &removeBypass},
		{"the change arrives before any HostedCluster state", []fact{removeBypass}, []string{}, nil},
		{"symptoms follow: proxy-tunnel names the change", append([]fact{hc0, removeBypass, hc5}, seedSymptoms(t)...), []string{RuleProxyTunnel}, &removeBypass},
		{
			"a proxy is added without the bypass",
			[]fact{
				hcFact(t, noProxyState(), at(0)),
				changeFact(t, event.ProxySpec{}, proxySpec(tunnelNoProxy), at(5)),
			},
			[]string{RuleRiskyProxyChange}, nil,
		},
		{
			"an edit that keeps the bypass",
			[]fact{hc0, changeFact(t, proxySpec(seedNoProxy), proxySpec(seedNoProxy+",.example.net"), at(5))},
			[]string{}, nil,
		},
		{
			"the bypass is restored by a later edit",
			[]fact{hc0, removeBypass, changeFact(t, proxySpec(tunnelNoProxy), proxySpec(tunnelNoProxy+",kubernetes"), at(8))},
			[]string{}, nil,
		},
		{
			"an edit between two tunnelling specs is not the trigger; the one before it is",
			[]fact{hc0, removeBypass, changeFact(t, proxySpec(tunnelNoProxy), proxySpec(tunnelNoProxy+",.example.net"), at(8))},
			[]string{RuleRiskyProxyChange}, &removeBypass,
		},
		{
			"the tunnelling spec predates every edit the bot saw",
			[]fact{hcFact(t, seedHC(tunnelNoProxy), at(0)), changeFact(t, proxySpec(tunnelNoProxy), proxySpec(tunnelNoProxy+",.example.net"), at(8))},
			[]string{}, nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := Diagnose(build(t, tt.facts...), at(60))
			if got := rulesOf(ds); !slices.Equal(got, tt.rules) {
				t.Fatalf("rules = %v, want %v\n%s", got, tt.rules, render(ds))
			}
			if len(ds) == 0 {
				return
			}
			d := ds[0]
			if d.Fix == nil || !strings.Contains(d.Fix.After, "kubernetes") {
				t.Errorf("fix = %+v", d.Fix)
			}
			if tt.trigger == nil {
				return
			}
			ch := tt.trigger.p.(event.ProxyChange)
			want := &ProxyChangeRef{
				At: tt.trigger.e.Time, Target: "HostedCluster/clusters/example",
				OldHTTPSProxy: ch.Old.HTTPSProxy, NewHTTPSProxy: ch.New.HTTPSProxy,
				OldNoProxy: ch.Old.NoProxy, NewNoProxy: ch.New.NoProxy,
				Added: ch.NoProxyAdded, Removed: ch.NoProxyRemoved,
			}
			if !reflect.DeepEqual(d.Trigger, want) {
				t.Errorf("trigger = %+v\nwant %+v", d.Trigger, want)
			}
		})
	}

	// The warning itself.
	ds := Diagnose(build(t, hc0, removeBypass, hc5), at(60))
	d := ds[0]
	if d.Severity != SeverityWarning || d.Confidence.Level != ConfidenceHigh ||
		!slices.Equal(d.Symptoms, []string{"proxy/clusters/example"}) ||
		d.Fix.After != ".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14" ||
		!slices.Equal(d.Trigger.Removed, []string{serviceCIDR}) ||
		!strings.Contains(d.RootCause, `noProxy ".corp.example,172.31.0.0/16" → ".corp.example"`) ||
		!strings.Contains(d.RootCause, "No symptoms yet") {
		t.Errorf("risky-proxy-change:\n%s", render(ds))
	}
	// When symptoms follow, the change is named in the cause too.
	ds = Diagnose(build(t, append([]fact{hc0, removeBypass, hc5}, seedSymptoms(t)...)...), at(60))
	if !strings.Contains(ds[0].RootCause, "It began with the proxy change seen at 2026-06-03T19:05:00Z") {
		t.Errorf("proxy-tunnel cause does not name the change:\n%s", ds[0].RootCause)
	}
	// Symptoms older than the change were not caused by it: no trigger.
	ds = Diagnose(build(t, hc0, nodeFact(t, nodeA, event.ConditionFalse, at(-10), at(-10)), removeBypass, hc5), at(60))
	if d, ok := find(ds, RuleProxyTunnel); !ok || d.Trigger != nil {
		t.Errorf("symptoms predating the change: want proxy-tunnel without trigger\n%s", render(ds))
	}
}

func TestNodesNotReady(t *testing.T) {
	direct := hcFact(t, seedHC(seedNoProxy+",kubernetes"), at(0))
	tests := []struct {
		name     string
		facts    []fact
		fire     bool
		severity Severity
		level    Level
		contains string
	}{
		{"one of three", []fact{direct, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), nodeFact(t, nodeB, event.ConditionTrue, at(1), at(1)), nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1))},
			true, SeverityWarning, ConfidenceMedium, "1 of 3 nodes are NotReady"},
		{"all nodes", []fact{direct, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), nodeFact(t, nodeB, event.ConditionUnknown, at(21), at(21))},
			true, SeverityCritical, ConfidenceMedium, "2 of 2 nodes are NotReady"},
		{"VMs not running", []fact{direct, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), launcherFact(t, nodeA, "Pending", at(19))},
			true, SeverityCritical, ConfidenceHigh, "The VMs behind 1 of them are not running"},
		{"HostedCluster not seen yet", []fact{nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20))},
			true, SeverityCritical, ConfidenceLow, "proxy cause is not ruled out"},
		{"no proxy", []fact{hcFact(t, noProxyState(), at(0)), nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20))},
			true, SeverityCritical, ConfidenceMedium, "no HTTPS proxy"},
		{"rollout of a fixed spec pending", []fact{direct, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), apiProxyFact(t, nodeA, event.ProxyModeTunnel, false, at(20))},
			true, SeverityCritical, ConfidenceMedium, "still run in tunnel mode"},
		{"all Ready", []fact{direct, nodeFact(t, nodeA, event.ConditionTrue, at(20), at(20))}, false, "", "", ""},
		{"NotReady then deleted", []fact{direct, nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), nodeDeleted(t, nodeA, at(30))}, false, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := Diagnose(build(t, tt.facts...), at(60))
			d, ok := find(ds, RuleNodesNotReady)
			if ok != tt.fire || len(ds) != map[bool]int{true: 1, false: 0}[tt.fire] {
				t.Fatalf("fired = %v, want %v\n%s", ok, tt.fire, render(ds))
			}
			if !ok {
				return
			}
			if d.Severity != tt.severity || d.Confidence.Level != tt.level || !strings.Contains(d.RootCause, tt.contains) {
				t.Errorf("got %s/%s, want %s/%s containing %q\n%s", d.Severity, d.Confidence.Level, tt.severity, tt.level, tt.contains, render(ds))
			}
			if d.Fix != nil {
				t.Errorf("nodes-notready offers no fix, got %+v", d.Fix)
			}
			if len(d.NextSteps) == 0 || !slices.Contains(d.Symptoms, "node/"+nodeA) {
				t.Errorf("next steps %q, symptoms %q", d.NextSteps, d.Symptoms)
			}
		})
	}
}

func TestOperatorCrashLoop(t *testing.T) {
	direct := hcFact(t, seedHC(seedNoProxy), at(0))
	const x509 = "E0603 19:38:28.981007 1 reflector.go:1] Get \"https://172.31.0.1:443/api\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
	stack := seedMessage + "\ngoroutine 1 [running]:\nk8s.io/klog/v2.stacks(0x1)\n\t/go/src/klog.go:1"
	tests := []struct {
		name     string
		facts    []fact
		level    Level
		contains []string
	}{
		{"apiserver connectivity without a proxy cause", []fact{direct, seedCrash(t, at(25))}, ConfidenceMedium,
			[]string{"cannot reach the API server", "No proxy cause", `the noProxy string contains "172.31.0.0/16"`}},
		{"unknown authority", []fact{direct, crashFact(t, "openshift-ingress-operator", "ingress-operator-1", x509, 4, at(25))}, ConfidenceMedium,
			[]string{"TLS-intercepting proxy"}},
		{"no signature", []fact{direct, crashFact(t, "openshift-ingress-operator", "ingress-operator-1", "panic: boom", 4, at(25))}, ConfidenceLow,
			[]string{"says: panic: boom."}},
		{"the fatal line, not the stack dump after it", []fact{direct, crashFact(t, scaNamespace, scaPod, stack, 4, at(25))}, ConfidenceMedium,
			[]string{"cmd.go:162] failed checking apiserver connectivity"}},
		{"HostedCluster not seen yet", []fact{seedCrash(t, at(25))}, ConfidenceLow, []string{"cannot reach the API server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := Diagnose(build(t, tt.facts...), at(60))
			if got := rulesOf(ds); !slices.Equal(got, []string{RuleOperatorCrashLoop}) {
				t.Fatalf("rules = %v\n%s", got, render(ds))
			}
			d := ds[0]
			if d.Confidence.Level != tt.level || d.Fix != nil || len(d.NextSteps) == 0 {
				t.Errorf("confidence %s, fix %v, next %q", d.Confidence.Level, d.Fix, d.NextSteps)
			}
			for _, want := range tt.contains {
				if !strings.Contains(d.RootCause, want) {
					t.Errorf("root cause lacks %q:\n%s", want, d.RootCause)
				}
			}
		})
	}
	// Cleared: nothing.
	if ds := Diagnose(build(t, direct, seedCrash(t, at(25)), crashCleared(t, scaNamespace, scaPod, at(30))), at(60)); len(ds) != 0 {
		t.Errorf("cleared crashloop still diagnosed:\n%s", render(ds))
	}
}

func TestHostedAPIUnreachable(t *testing.T) {
	withCond := func(status event.ConditionStatus) fact {
		s := seedHC(seedNoProxy)
		s.Conditions = []event.Condition{{Type: "KubeAPIServerAvailable", Status: status, Reason: "WaitingForAvailable", Message: "kube-apiserver deployment has 0 ready replicas", LastTransitionTime: at(29)}}
		return hcFact(t, s, at(31))
	}
	tests := []struct {
		name  string
		facts []fact
		fire  bool
		level Level
	}{
		{"probe fails", []fact{withCond(event.ConditionTrue), reachFact(t, false, at(30), at(30))}, true, ConfidenceMedium},
		{"probe and condition", []fact{withCond(event.ConditionFalse), reachFact(t, false, at(30), at(30))}, true, ConfidenceHigh},
		{"condition only", []fact{withCond(event.ConditionFalse)}, true, ConfidenceMedium},
		{"reachable again", []fact{withCond(event.ConditionTrue), reachFact(t, false, at(30), at(30)), reachFact(t, true, at(35), at(35))}, false, ""},
		{"HostedCluster not seen yet", []fact{reachFact(t, false, at(30), at(30))}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := Diagnose(build(t, tt.facts...), at(60))
			d, ok := find(ds, RuleHostedAPIUnreachable)
			if ok != tt.fire {
				t.Fatalf("fired = %v, want %v\n%s", ok, tt.fire, render(ds))
			}
			if !ok {
				return
			}
			if d.Severity != SeverityCritical || d.Confidence.Level != tt.level || d.Fix != nil || len(d.NextSteps) == 0 || len(d.Evidence) == 0 {
				t.Errorf("unexpected diagnosis\n%s", render(ds))
			}
			if !strings.Contains(strings.Join(d.NextSteps, "\n"), "-n clusters-example") {
				t.Errorf("next steps should name the control-plane namespace: %q", d.NextSteps)
			}
		})
	}
}

// A cluster the agent does not watch (its admin kubeconfig refused) is
// diagnosed as such, with the agent's reason; it is not an unreachable API
// server, and it clears once the agent reaches the cluster again.
func TestHostedNotWatched(t *testing.T) {
	const why = `admin kubeconfig refused: Secret clusters/example-admin-kubeconfig: user "admin" uses an exec plugin (exec); hcpbot runs no programs and accepts inline credentials only`
	unwatched := hosted(t, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "hc-uid"},
		event.Reachability{Unwatched: true, Error: why, Since: at(30)}, event.TransitionAt("reachable=false:x", at(30)), at(30))
	ds := Diagnose(build(t, hcFact(t, seedHC(seedNoProxy), at(1)), unwatched), at(60))
	if got := rulesOf(ds); !slices.Equal(got, []string{RuleHostedNotWatched}) {
		t.Fatalf("rules = %v, want only %s\n%s", got, RuleHostedNotWatched, render(ds))
	}
	d := ds[0]
	if !strings.Contains(d.Title, "hcpbot does not watch clusters/example on mgmt-east") || !strings.Contains(d.RootCause, why) ||
		d.Severity != SeverityWarning || len(d.Evidence) != 1 || !strings.Contains(d.Evidence[0].Text, why) || d.Evidence[0].At != at(30) {
		t.Errorf("diagnosis:\n%s", render(ds))
	}
	if !strings.Contains(strings.Join(d.NextSteps, "\n"), "example-admin-kubeconfig") {
		t.Errorf("next steps should name the Secret: %q", d.NextSteps)
	}
	c := build(t, hcFact(t, seedHC(seedNoProxy), at(1)), unwatched)
	if got, since, ok := c.Unwatched(); !ok || got != why || since != at(30) {
		t.Errorf("Unwatched() = %q, %v, %v", got, since, ok)
	}
	// Watched again: nothing left.
	c = build(t, hcFact(t, seedHC(seedNoProxy), at(1)), unwatched, reachFact(t, true, at(40), at(40)))
	if ds := Diagnose(c, at(60)); len(ds) != 0 {
		t.Errorf("want no diagnosis once watched:\n%s", render(ds))
	}
	if _, _, ok := c.Unwatched(); ok {
		t.Error("Unwatched() after the cluster was reached")
	}
}

func TestManagementProxyLint(t *testing.T) {
	ocp := func(spec, status string) fact {
		return newFact(t, nil, event.ObjectRef{Kind: "Proxy", Name: "cluster", UID: "proxy-uid"}, event.OpenShiftProxy{
			Spec:   event.ProxySpec{HTTPProxy: seedProxy, HTTPSProxy: seedProxy, NoProxy: spec},
			Status: event.ProxyStatus{HTTPProxy: seedProxy, HTTPSProxy: seedProxy, NoProxy: status},
		}, "rv-1", at(0))
	}
	rendered := ".cluster.local,.svc,.corp.example,10.128.0.0/14,127.0.0.1,172.30.0.0/16,api-int.mgmt.corp.example,localhost"
	c := NewCluster(mgmtKey)
	f := ocp(".corp.example", rendered)
	c.Apply(f.e, f.p)
	ds := Diagnose(c, at(60))
	if got := rulesOf(ds); !slices.Equal(got, []string{RuleManagementProxyLint}) {
		t.Fatalf("rules = %v\n%s", got, render(ds))
	}
	d := ds[0]
	if d.Severity != SeverityInfo || d.Fix == nil || d.Fix.Target != "Proxy/cluster" || d.Fix.After != ".corp.example,kubernetes" {
		t.Errorf("lint diagnosis:\n%s", render(ds))
	}
	// With kubernetes listed there is nothing to say.
	c = NewCluster(mgmtKey)
	f = ocp(".corp.example,kubernetes", rendered+",kubernetes")
	c.Apply(f.e, f.p)
	if ds := Diagnose(c, at(60)); len(ds) != 0 {
		t.Errorf("want no diagnosis:\n%s", render(ds))
	}
}

func TestInhibition(t *testing.T) {
	facts := append([]fact{hcFact(t, seedHC(tunnelNoProxy), at(5))}, seedSymptoms(t)...)
	facts = append(facts, crashFact(t, "openshift-ingress-operator", "ingress-operator-1", "panic: boom", 4, at(26)))
	ds := Diagnose(build(t, facts...), at(60))
	if got := rulesOf(ds); !slices.Equal(got, []string{RuleProxyTunnel, RuleOperatorCrashLoop}) {
		t.Fatalf("rules = %v\n%s", got, render(ds))
	}
	// The unrelated crash is reported alone, with a hint.
	cl := ds[1]
	if !slices.Equal(cl.Symptoms, []string{"pod/openshift-ingress-operator/ingress-operator-1"}) || !strings.Contains(cl.RootCause, "A proxy-tunnel diagnosis is active") {
		t.Errorf("operator-crashloop:\n%s", render(ds[1:]))
	}
	// No symptom is claimed twice.
	seen := map[string]string{}
	for _, d := range ds {
		for _, s := range d.Symptoms {
			if by, dup := seen[s]; dup {
				t.Errorf("%s claimed by %s and %s", s, by, d.Rule)
			}
			seen[s] = d.Rule
		}
	}

	// A rule set is a value: a custom rule ahead of the built-ins explains
	// a node, and nodes-notready leaves it out.
	custom := append(RuleSet{{"maintenance", func(c *Cluster, _ time.Time, _ Explained) (Diagnosis, bool) {
		return Diagnosis{Severity: SeverityInfo, Title: "node in maintenance", Symptoms: []string{"node/" + nodeA}}, true
	}}}, DefaultRules()...)
	c := build(t, hcFact(t, seedHC(seedNoProxy), at(0)), nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)), nodeFact(t, nodeB, event.ConditionFalse, at(21), at(21)))
	ds = custom.Diagnose(c, at(60))
	if got := rulesOf(ds); !slices.Equal(got, []string{"maintenance", RuleNodesNotReady}) {
		t.Fatalf("rules = %v\n%s", got, render(ds))
	}
	if !slices.Equal(ds[1].Symptoms, []string{"node/" + nodeB}) {
		t.Errorf("nodes-notready symptoms = %q, want only %s", ds[1].Symptoms, nodeB)
	}
}

// TestEvidenceCapped: a large outage keeps the diagnosis readable while
// the symptoms still list every node.
func TestEvidenceCapped(t *testing.T) {
	facts := []fact{hcFact(t, seedHC(tunnelNoProxy), at(5)), seedCrash(t, at(25))}
	for i := range 25 {
		facts = append(facts, nodeFact(t, "node-"+string(rune('a'+i)), event.ConditionFalse, at(10+i), at(10+i)))
	}
	ds := Diagnose(build(t, facts...), at(60))
	d := ds[0]
	nodes := 0
	for _, e := range d.Evidence {
		if e.Kind == "node" {
			nodes++
		}
	}
	if nodes != maxEvidencePerKind+1 || !slices.ContainsFunc(d.Evidence, func(e Evidence) bool { return e.Text == "and 15 more NotReady nodes" }) {
		t.Errorf("node evidence lines = %d\n%s", nodes, render(ds))
	}
	if n := len(d.Symptoms); n != 25+2 {
		t.Errorf("symptoms = %d, want every node, the pod and the proxy", n)
	}
}

// TestNoCredentialsInOutput: proxy credentials never reach a diagnosis,
// not even ones pasted into noProxy.
func TestNoCredentialsInOutput(t *testing.T) {
	s := seedHC(tunnelNoProxy + ",http://alice:s3cret@proxy.corp.example")
	s.Proxy.HTTPProxy = "http://alice:s3cret@proxy.corp.example:3128"
	s.Proxy.HTTPSProxy = s.Proxy.HTTPProxy
	old := s.Proxy
	old.NoProxy = seedNoProxy
	facts := append([]fact{hcFact(t, s, at(5)), changeFact(t, old, s.Proxy, at(4))}, seedSymptoms(t)...)
	ds := Diagnose(build(t, facts...), at(60))
	if len(ds) == 0 {
		t.Fatal("no diagnosis")
	}
	out := render(ds)
	for _, d := range ds {
		if d.Fix != nil {
			out += strings.Join(d.Fix.Add, ",") + d.Fix.Before + d.Fix.After
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Fatalf("credentials leaked:\n%s", out)
	}
	if strings.Contains(strings.Join(ds[0].NextSteps, "\n"), "oc patch") {
		t.Errorf("a redacted noProxy must not be offered as a patch: %q", ds[0].NextSteps)
	}
}

func TestDiagnoseIsDeterministic(t *testing.T) {
	facts := append([]fact{hcFact(t, seedHC(tunnelNoProxy), at(5)), reachFact(t, false, at(30), at(30))}, seedSymptoms(t)...)
	c := build(t, facts...)
	a, b := Diagnose(c, at(60)), Diagnose(c, at(600))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("Diagnose depends on now or on map order:\n%s\n%s", render(a), render(b))
	}
}

// TestVerdict: HyperShift's decision for the seed networks, per release.
func TestVerdict(t *testing.T) {
	tests := []struct {
		noProxy                 string
		legacy, recent, unknown bool // tunnel?
		fixAfter                string
	}{
		{seedNoProxy, false, false, false, ""},
		{tunnelNoProxy, true, true, true, ".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14"},
		// Any entry containing "kubernetes" bypasses under both rules,
		// though Go clients dialling https://kubernetes still use the proxy.
		{"kubernetes.default", false, false, false, ""},
		// Both rules look for lower-case "kubernetes".
		{"Kubernetes", true, true, true, "Kubernetes,172.31.0.0/16,10.132.0.0/14"},
		// The service network written with host bits: not equal for the
		// recent rule, not a substring for the legacy one; Missing counts
		// it as covering, so the fix adds kubernetes and the cluster
		// network only.
		{"172.31.0.1/16", true, true, true, "172.31.0.1/16,kubernetes,10.132.0.0/14"},
		{"10.132.0.0/14", false, false, false, ""},
		{"172.20.0.10", false, true, true, "172.20.0.10,kubernetes,172.31.0.0/16,10.132.0.0/14"},
		{"172.16.0.0/12", true, false, true, "172.16.0.0/12,kubernetes,10.132.0.0/14"},
		{"*", true, false, true, "*,kubernetes"},
	}
	for _, tt := range tests {
		for _, r := range []struct {
			version string
			want    bool
		}{{"4.18.12", tt.legacy}, {"4.23.0", tt.recent}, {"", tt.unknown}} {
			hc := withVersion(seedHC(tt.noProxy), r.version)
			if got := decide(hc, hc.Proxy).tunnel(); got != r.want {
				t.Errorf("%q at %q: tunnel = %v, want %v", tt.noProxy, r.version, got, r.want)
			}
		}
		if tt.fixAfter == "" {
			continue
		}
		hc := seedHC(tt.noProxy)
		if f := noProxyFix("t", "noProxy", hc.Proxy, hc); f == nil || f.After != tt.fixAfter {
			t.Errorf("%q: fix = %+v, want %q", tt.noProxy, f, tt.fixAfter)
		}
	}
	if decide(noProxyState(), event.ProxySpec{}).tunnel() {
		t.Error("no proxy, no tunnel")
	}
}
