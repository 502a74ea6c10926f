// Package noproxy explains what a NO_PROXY / noProxy list means to the
// clients that run in and around a hosted control plane, and lints the proxy
// settings of a cluster.
//
// NO_PROXY has no specification and every HTTP stack reads it differently,
// so a list that works for Go operators can still send curl health checks or
// Python tooling through the proxy. The package evaluates a list with six
// independent models, each a line-by-line reading of one client's source,
// odd corners included, each confirmed against the real client by the
// tests:
//
//   - Go: golang.org/x/net/http/httpproxy (v0.62.0, the version this module
//     requires), which net/http and client-go use;
//   - Curl: curl 7.86–8.8 lib/noproxy.c with the host name prepared by
//     lib/url.c and lib/urlapi.c (verified against curl 7.88.1);
//   - Python: requests 2.34 utils.should_bypass_proxies together with
//     CPython 3.11 urllib.request.proxy_bypass_environment, which requests
//     consults as a fallback;
//   - Urllib: CPython 3.11 urllib.request.ProxyHandler alone (Ansible's
//     get_url/uri, scripts without requests): no CIDRs;
//   - Wget: GNU Wget 1.21 sufmatch: no CIDRs, no wildcards, no ports;
//   - Node: the npm package proxy-from-env 2.1.0 (axios): plain names match
//     exactly, ".name"/"*.name" suffixes, ports honoured, no CIDRs.
//
// Clients is the default set the cluster checks judge by; AllClients is
// every family.
//
// HyperShift decides separately, from the HostedCluster's spec noProxy,
// whether the kube-apiserver-proxy on every worker tunnels API traffic
// through the HTTPS proxy; HyperShiftBypass models the rule of recent and of
// older releases, RuleForRelease picks one from a release version, and Lint
// judges a HostedCluster under its release's rule (ClusterProxy.Release), or
// under both when the release is unknown.
//
// Everything here is pure: no I/O, no global mutable state.
//
// lint.go is over 450 lines: Lint's checks sit in the order their findings
// are reported, sharing the ClusterProxy helpers, and Missing and Merge
// derive the fix from the same checks: the fix cannot drift from the
// findings it fixes.
package noproxy
