package noproxy

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// ReleaseRule selects which HyperShift release's kube-apiserver-proxy rule
// to apply.
type ReleaseRule int

const (
	// Recent is the rule since openshift/hypershift#8254 (OCPBUGS-83328,
	// April 2026), shouldSkipProxyForKAS in
	// hypershift-operator/controllers/nodepool/apiserver-haproxy/haproxy.go:
	// bypass when a trimmed entry contains "kubernetes", when an entry
	// equals the first service or cluster network CIDR, or when
	// golang.org/x/net/http/httpproxy with that noProxy exempts
	// https://<external address>:<external port> or
	// https://<internal address>:<internal port> (so ".example.com",
	// "example.com", covering CIDRs, "host:port" with the right port, "*"
	// and loopback addresses all count).
	Recent ReleaseRule = iota + 1
	// Legacy is the rule of 4.14–4.22 (openshift/hypershift#3999, with the
	// external address added by #4693 and backported to 4.14): a plain
	// strings.Contains on the whole noProxy string for the external
	// address, the internal address, "kubernetes", the service CIDR and
	// the cluster CIDR. Substrings count ("10.0.0.1" is found in
	// "10.0.0.10"), suffix and CIDR semantics do not (".example.com" does
	// not cover "api.example.com").
	Legacy
)

func (r ReleaseRule) String() string {
	switch r {
	case Recent:
		return "recent"
	case Legacy:
		return "legacy"
	}
	return fmt.Sprintf("ReleaseRule(%d)", int(r))
}

// RuleForRelease tells which rule a HyperShift release applies: Legacy for
// 4.14–4.22, Recent for every other major.minor (4.23 and later; earlier
// releases are read as Recent too). ok is false when the version does not
// say: "" (status.version not written yet) or no major.minor. A leading
// "v" and suffixes ("4.19.0-ec.2", "4.23") are accepted.
func RuleForRelease(version string) (rule ReleaseRule, ok bool) {
	v := strings.TrimPrefix(strings.TrimSpace(version), "v")
	majS, rest, found := strings.Cut(v, ".")
	if !found {
		return 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	major, err1 := strconv.Atoi(majS)
	minor, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil {
		return 0, false
	}
	if major == 4 && minor >= 14 && minor <= 22 {
		return Legacy, true
	}
	return Recent, true
}

// Defaults HyperShift applies to the worker-side API address
// (support/config DefaultAdvertiseIPv4Address / DefaultAdvertiseIPv6Address,
// KASPodDefaultPort).
const (
	DefaultInternalAddressV4 = "172.20.0.1"
	DefaultInternalAddressV6 = "fd00::1"
	DefaultInternalPort      = 6443
)

// HyperShiftInput is what the kube-apiserver-proxy decision reads from a
// HostedCluster.
type HyperShiftInput struct {
	// NoProxy is spec.configuration.proxy.noProxy — the spec value, not
	// the status that HyperShift extends with its defaults.
	NoProxy string
	// ServiceCIDR and ClusterCIDR are the first entries of
	// spec.networking.serviceNetwork / clusterNetwork.
	ServiceCIDR string
	ClusterCIDR string
	// ExternalAddress and ExternalPort are the API server endpoint the
	// workers use (from the admin kubeconfig; api.<name>.hypershift.local
	// for private clusters).
	ExternalAddress string
	ExternalPort    int32
	// InternalAddress and InternalPort are where kube-apiserver-proxy
	// listens on every node: spec.networking.apiServer.advertiseAddress and
	// port; empty/zero mean the defaults above (IPv6 default when the
	// service CIDR is IPv6).
	InternalAddress string
	InternalPort    int32
}

// HyperShiftBypass reports whether HyperShift renders the kube-apiserver-
// proxy as a plain HAProxy straight to the API server (true) rather than
// the kubernetes-default-proxy container that tunnels API traffic through
// the HTTPS proxy with HTTP CONNECT (false).
//
// It is only the noProxy part of the decision: HyperShift never tunnels
// when httpsProxy is empty or the platform does not reach the control plane
// through the internet (util.ConnectsThroughInternetToControlplane: AWS and
// Azure private endpoints); callers check that first.
//
// Empty addresses and CIDRs mean "unknown" and never match. (The Legacy
// source would find the empty string in any noProxy; HyperShift never
// passes empty values because the API defaults them.)
func HyperShiftBypass(release ReleaseRule, in HyperShiftInput) bool {
	ok, _ := hyperShiftDecide(release, in)
	return ok
}

// hyperShiftDecide also says why it bypasses.
func hyperShiftDecide(release ReleaseRule, in HyperShiftInput) (bool, string) {
	in = in.withDefaults()
	switch release {
	case Recent:
		return hyperShiftRecent(in)
	case Legacy:
		return hyperShiftLegacy(in)
	}
	return false, ""
}

func (in HyperShiftInput) withDefaults() HyperShiftInput {
	in.ServiceCIDR = canonicalCIDR(in.ServiceCIDR)
	in.ClusterCIDR = canonicalCIDR(in.ClusterCIDR)
	if in.InternalAddress == "" {
		in.InternalAddress = DefaultInternalAddressV4
		if ip, _, err := net.ParseCIDR(in.ServiceCIDR); err == nil && ip.To4() == nil {
			in.InternalAddress = DefaultInternalAddressV6
		}
	}
	if in.InternalPort == 0 {
		in.InternalPort = DefaultInternalPort
	}
	if in.ExternalPort == 0 {
		in.ExternalPort = 443
	}
	return in
}

// canonicalCIDR mirrors HyperShift, which compares against
// ipnet.IPNet.String(): the masked network.
func canonicalCIDR(s string) string {
	if _, n, err := net.ParseCIDR(strings.TrimSpace(s)); err == nil {
		return n.String()
	}
	return s
}

func hyperShiftRecent(in HyperShiftInput) (bool, string) {
	for _, e := range strings.Split(in.NoProxy, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
		case strings.Contains(e, "kubernetes"):
			return true, fmt.Sprintf("entry %q contains \"kubernetes\"", e)
		case in.ServiceCIDR != "" && e == in.ServiceCIDR:
			return true, fmt.Sprintf("entry %q equals the service network", e)
		case in.ClusterCIDR != "" && e == in.ClusterCIDR:
			return true, fmt.Sprintf("entry %q equals the cluster network", e)
		}
	}
	// The proxy URL only has to be non-empty: nothing is dialled.
	proxyFor := (&httpproxy.Config{HTTPSProxy: "http://proxy.invalid:3128", NoProxy: in.NoProxy}).ProxyFunc()
	for _, a := range []struct {
		what, host string
		port       int32
	}{
		{"external API address", in.ExternalAddress, in.ExternalPort},
		{"internal API address", in.InternalAddress, in.InternalPort},
	} {
		if a.host == "" {
			continue
		}
		hostport := net.JoinHostPort(a.host, strconv.Itoa(int(a.port)))
		p, err := proxyFor(&url.URL{Scheme: "https", Host: hostport})
		if err == nil && p == nil {
			return true, fmt.Sprintf("Go's NO_PROXY matching exempts the %s https://%s", a.what, hostport)
		}
	}
	return false, ""
}

func hyperShiftLegacy(in HyperShiftInput) (bool, string) {
	for _, s := range []string{in.ExternalAddress, in.InternalAddress, "kubernetes", in.ServiceCIDR, in.ClusterCIDR} {
		if s != "" && strings.Contains(in.NoProxy, s) {
			return true, fmt.Sprintf("the noProxy string contains %q", s)
		}
	}
	return false, ""
}
