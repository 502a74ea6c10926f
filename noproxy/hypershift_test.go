package noproxy

import "testing"

func TestHyperShiftBypass(t *testing.T) {
	// The fixture of openshift/hypershift TestShouldSkipProxyForKAS
	// (haproxy_test.go), which pins the recent rule; the legacy column is
	// the substring search of 4.14–4.22 on the same inputs.
	base := HyperShiftInput{
		ServiceCIDR:     "10.134.0.0/16",
		ClusterCIDR:     "10.128.0.0/14",
		ExternalAddress: "api.test.example.com",
		ExternalPort:    6443,
		InternalAddress: "172.20.0.1",
		InternalPort:    6443,
	}
	tests := []struct {
		noProxy        string
		recent, legacy bool
	}{
		{"", false, false},
		{"localhost,127.0.0.1,api.test.example.com", true, true},
		{"localhost,127.0.0.1,172.20.0.1", true, true},
		{"localhost,.example.com", true, false},
		{"localhost,example.com", true, false},
		{"localhost,.test.example.com", true, false},
		{"localhost,172.16.0.0/12", true, false},
		{"localhost,kubernetes.svc,127.0.0.1", true, true},
		{"localhost,10.134.0.0/16", true, true},
		{"localhost,10.128.0.0/14", true, true},
		{"*", true, false},
		{"localhost,127.0.0.1,.other-domain.com,192.168.0.0/16", false, false},
		{" localhost , .example.com , 127.0.0.1 ", true, false},
		{"localhost,api.test.example.com:6443", true, true},
		{"localhost,172.20.0.1:6443", true, true},
		{"localhost,api.test.example.com:8080", false, true},
		// legacy substring quirks
		{"172.20.0.10", false, true},
		{"xkubernetesx", true, true},
		{"10.134.0.0/160", false, true},
		// case: both rules look for lower-case "kubernetes"
		{"Kubernetes", false, false},
		// the recent rule compares trimmed entries, not substrings
		{" 10.134.0.0/16 ", true, true},
		{"10.134.0.0/16x", false, true},
		// seed 000 before and after the fix
		{"192.168.201.0/24,.apps.ocp7.stormshift.coe.muc.redhat.com", false, false},
		{"kubernetes,192.168.201.0/24,.apps.ocp7.stormshift.coe.muc.redhat.com", true, true},
	}
	for _, tt := range tests {
		in := base
		in.NoProxy = tt.noProxy
		if got := HyperShiftBypass(Recent, in); got != tt.recent {
			t.Errorf("Recent(%q) = %v, want %v", tt.noProxy, got, tt.recent)
		}
		if got := HyperShiftBypass(Legacy, in); got != tt.legacy {
			t.Errorf("Legacy(%q) = %v, want %v", tt.noProxy, got, tt.legacy)
		}
	}
}

func TestHyperShiftDefaultsAndUnknowns(t *testing.T) {
	tests := []struct {
		name           string
		in             HyperShiftInput
		recent, legacy bool
	}{
		{"default internal address", HyperShiftInput{NoProxy: "172.20.0.0/16", ServiceCIDR: "172.31.0.0/16"}, true, false},
		{"default internal port", HyperShiftInput{NoProxy: "172.20.0.1:6443", ServiceCIDR: "172.31.0.0/16"}, true, true},
		{"wrong internal port", HyperShiftInput{NoProxy: "172.20.0.1:443", ServiceCIDR: "172.31.0.0/16"}, false, true},
		{"IPv6 default internal address", HyperShiftInput{NoProxy: "fd00::1", ServiceCIDR: "fd02::/112"}, true, true},
		{"advertiseAddress", HyperShiftInput{NoProxy: "192.168.100.0/24", InternalAddress: "192.168.100.7", InternalPort: 7443}, true, false},
		{"service CIDR is canonicalised", HyperShiftInput{NoProxy: "172.31.0.0/16", ServiceCIDR: "172.31.0.1/16"}, true, true},
		{"external default port 443", HyperShiftInput{NoProxy: "api.example.com:443", ExternalAddress: "api.example.com"}, true, true},
		// Empty values are unknown and never match, though the legacy
		// source would find "" in any string.
		{"unknown addresses", HyperShiftInput{NoProxy: "foo"}, false, false},
		{"loopback external address", HyperShiftInput{NoProxy: "foo", ExternalAddress: "127.0.0.1"}, true, false},
	}
	for _, tt := range tests {
		if got := HyperShiftBypass(Recent, tt.in); got != tt.recent {
			t.Errorf("%s: Recent = %v, want %v", tt.name, got, tt.recent)
		}
		if got := HyperShiftBypass(Legacy, tt.in); got != tt.legacy {
			t.Errorf("%s: Legacy = %v, want %v", tt.name, got, tt.legacy)
		}
	}
	if HyperShiftBypass(ReleaseRule(0), HyperShiftInput{NoProxy: "*"}) {
		t.Error("an unknown release rule must not bypass")
	}
}

func TestRuleForRelease(t *testing.T) {
	tests := []struct {
		version string
		rule    ReleaseRule
		ok      bool
	}{
		{"4.14.0", Legacy, true},
		{"4.18.12", Legacy, true},
		{"4.19.0-ec.2", Legacy, true},
		{"4.22.3", Legacy, true},
		{"v4.20.1", Legacy, true},
		{"4.23.0", Recent, true},
		{"5.0.0", Recent, true},
		{"4.13.9", Recent, true}, // outside 4.14–4.22 is recent
		{"", 0, false},
		{"latest", 0, false},
		{"4", 0, false},
		{"4.x", 0, false},
	}
	for _, tt := range tests {
		rule, ok := RuleForRelease(tt.version)
		if rule != tt.rule || ok != tt.ok {
			t.Errorf("RuleForRelease(%q) = %v, %v; want %v, %v", tt.version, rule, ok, tt.rule, tt.ok)
		}
	}
}
