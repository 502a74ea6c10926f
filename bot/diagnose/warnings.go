package diagnose

import (
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// Codes of the proactive warnings: what will break a hosted cluster
// although nothing is broken yet. They are stable, like noproxy's codes:
// the digest tracks them from one run to the next.
const (
	WarnTrustedCAExpiring    = "trusted-ca-expiring"
	WarnTrustedCAExpired     = "trusted-ca-expired"
	WarnTrustedCAMissing     = "trusted-ca-missing"
	WarnTrustedCAUnusable    = "trusted-ca-unusable"
	WarnIgnitionThroughProxy = "ignition-through-proxy"
	WarnKonnectivityThrough  = "konnectivity-through-proxy"
)

// CAExpiryWarning is how long before a proxy CA expires Warnings says so.
const CAExpiryWarning = 30 * 24 * time.Hour

// Warnings are the proactive findings of one hosted cluster at now: a
// proxy CA bundle that is missing, unusable, expired or expiring within
// CAExpiryWarning (HyperShift renews leaf certificates 30 days before
// they expire, and nobody renews a corporate CA for you), and a noProxy
// that sends the workers' ignition or konnectivity traffic through the
// HTTPS proxy. They are findings, not diagnoses: the digest lists them
// per cluster and follows them from one digest to the next.
//
// The etcd quota is not among them: no API the agent reads reports the
// database size (HyperShift's EtcdAvailable says only whether etcd has
// quorum), so a warning would need etcd's metrics.
func Warnings(hc event.HostedClusterState, now time.Time) []noproxy.Finding {
	var out []noproxy.Finding
	if b := hc.TrustedCA; b != nil {
		out = append(out, caWarnings(*b, now)...)
	}
	for _, ep := range proxiedEndpoints(hc, hc.Proxy) {
		code := WarnIgnitionThroughProxy
		if ep.name == "konnectivity" {
			code = WarnKonnectivityThrough
		}
		out = append(out, noproxy.Finding{
			Severity: noproxy.SeverityWarning, Code: code, Entry: ep.endpoint,
			Reason: fmt.Sprintf("noProxy does not bypass %s, %s: that traffic goes through the HTTPS proxy, which may refuse or break it", ep.endpoint, ep.what),
			Fix:    "add " + ep.host + " to spec.configuration.proxy.noProxy",
		})
	}
	return out
}

// caWarnings judges the bundle's first expiry against now.
func caWarnings(b event.CABundle, now time.Time) []noproxy.Finding {
	cm := redact.RedactText(b.ConfigMap)
	switch {
	case !b.Found:
		return []noproxy.Finding{{Severity: noproxy.SeverityCritical, Code: WarnTrustedCAMissing, Entry: cm,
			Reason: "the proxy's trustedCA ConfigMap " + cm + " does not exist: nodes cannot verify the proxy's certificate",
			Fix:    "create ConfigMap " + cm + " with key ca-bundle.crt in the HostedCluster's namespace"}}
	case b.Problem != "":
		return []noproxy.Finding{{Severity: noproxy.SeverityCritical, Code: WarnTrustedCAUnusable, Entry: cm,
			Reason: "the proxy's trustedCA ConfigMap " + cm + " is unusable: " + b.Problem,
			Fix:    "put the corporate CA's PEM certificates under key ca-bundle.crt"}}
	case b.NotAfter.IsZero():
		return nil
	case !now.Before(b.NotAfter):
		return []noproxy.Finding{{Severity: noproxy.SeverityCritical, Code: WarnTrustedCAExpired, Entry: cm,
			Reason: fmt.Sprintf("certificate %q in %s expired on %s", b.Subject, cm, b.NotAfter.UTC().Format(time.DateOnly)),
			Fix:    "replace it in ConfigMap " + cm + " with the renewed CA"}}
	case b.NotAfter.Sub(now) < CAExpiryWarning:
		days := int(b.NotAfter.Sub(now).Hours() / 24)
		return []noproxy.Finding{{Severity: noproxy.SeverityWarning, Code: WarnTrustedCAExpiring, Entry: cm,
			Reason: fmt.Sprintf("certificate %q in %s expires on %s (in %d days)", b.Subject, cm, b.NotAfter.UTC().Format(time.DateOnly), days),
			Fix:    "add the renewed CA to ConfigMap " + cm + " before then (both may stay in the bundle)"}}
	}
	return nil
}

// proxiedEndpoint is an endpoint of the control plane the workers reach
// that spec's noProxy sends through the HTTPS proxy.
type proxiedEndpoint struct{ name, what, endpoint, host string }

// proxiedEndpoints are hc's ignition and konnectivity endpoints that a Go
// client (ignition, konnectivity-agent) sends through spec's HTTPS proxy
// (endpointProxied).
func proxiedEndpoints(hc event.HostedClusterState, spec event.ProxySpec) []proxiedEndpoint {
	var out []proxiedEndpoint
	for _, ep := range []proxiedEndpoint{
		{name: "ignition", what: "the ignition endpoint new workers boot from", endpoint: hc.IgnitionEndpoint},
		{name: "konnectivity", what: "the konnectivity server (oc logs, exec, port-forward, webhooks)", endpoint: hc.KonnectivityEndpoint},
	} {
		if host, ok := endpointProxied(spec, ep.endpoint); ok {
			ep.host = host
			out = append(out, ep)
		}
	}
	return out
}

func endpointNames(eps []proxiedEndpoint) []string {
	out := make([]string, len(eps))
	for i, ep := range eps {
		out[i] = ep.name
	}
	return out
}
