package diagnose

import (
	"strings"
)

// The stable rule IDs.
const (
	RuleProxyTunnel          = "proxy-tunnel"
	RuleRiskyProxyChange     = "risky-proxy-change"
	RuleHostedNotWatched     = "hosted-not-watched"
	RuleHostedAPIUnreachable = "hosted-api-unreachable"
	RuleNodesNotReady        = "nodes-notready"
	RuleOperatorCrashLoop    = "operator-crashloop"
	RuleManagementProxyLint  = "management-proxy-lint"
)

// DefaultRules returns the built-in rules in priority order. Adding a rule
// is one RuleFunc and one entry here; rules before it explain symptoms for
// it, rules after it see what it explained.
func DefaultRules() RuleSet {
	return RuleSet{
		{RuleProxyTunnel, proxyTunnel},
		{RuleRiskyProxyChange, riskyProxyChange},
		{RuleHostedNotWatched, hostedNotWatched},
		{RuleHostedAPIUnreachable, hostedAPIUnreachable},
		{RuleNodesNotReady, nodesNotReady},
		{RuleOperatorCrashLoop, operatorCrashLoop},
		{RuleManagementProxyLint, managementProxyLint},
	}
}

// RuleSummary names what a rule finds without naming a cluster, for lists
// of many clusters; "" for an unknown rule.
func RuleSummary(id string) string {
	switch id {
	case RuleProxyTunnel:
		return "API traffic tunnelled through the HTTPS proxy"
	case RuleRiskyProxyChange:
		return "a proxy change makes the workers tunnel API traffic"
	case RuleHostedNotWatched:
		return "hosted cluster not watched (admin kubeconfig unusable)"
	case RuleHostedAPIUnreachable:
		return "hosted cluster API unreachable"
	case RuleNodesNotReady:
		return "nodes NotReady without a proxy cause"
	case RuleOperatorCrashLoop:
		return "operator crashlooping without a proxy cause"
	case RuleManagementProxyLint:
		return "management cluster proxy lint"
	}
	return ""
}

// maxEvidencePerKind bounds the evidence lines of one kind in a diagnosis.
const maxEvidencePerKind = 10

// sentence ends s with a full stop unless it ends with punctuation.
func sentence(s string) string {
	if s == "" || strings.ContainsAny(s[len(s)-1:], ".!?…") {
		return s
	}
	return s + "."
}
