package digest_test

import (
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/noproxy"
)

// The noProxy findings of the digest judge by the client families the
// workloads use: the default adds urllib (Ansible) to Go, curl and
// requests; a Go-only fleet has no localhost gap (Go exempts loopback).
func TestBuildJudgesByConfiguredClients(t *testing.T) {
	const noLocalhost = "kubernetes,.svc,.cluster.local,172.31.0.0/16,10.132.0.0/14"
	build := func(clients []noproxy.Client) digest.Finding {
		d := digest.Build(t0, digest.Input{Clients: clients, Clusters: []digest.Cluster{{Key: keyBad, HostedCluster: hc(noLocalhost)}}})
		for _, f := range report(t, d, keyBad).Findings {
			if f.Code == noproxy.CodeMissingLocalhost {
				return f
			}
		}
		return digest.Finding{}
	}
	if f := build(nil); !strings.Contains(f.Reason, "curl, python, urllib clients") {
		t.Errorf("default families: missing-localhost = %+v, want it to name curl, python, urllib", f)
	}
	if f := build([]noproxy.Client{noproxy.Go}); f.Code != "" {
		t.Errorf("Go only: unexpected %+v", f)
	}
	if f := build([]noproxy.Client{noproxy.Go, noproxy.Node}); !strings.Contains(f.Reason, "in node clients") {
		t.Errorf("Go and node: missing-localhost = %+v", f)
	}
}

// A cluster whose noProxy protects the service network 10.0.0.0/18 with
// a CIDR: Go, curl and requests are protected, urllib (a default family)
// is not. With the default families the digest flags it; with [go, curl,
// requests] it does not; a per-cluster choice (a route's noProxyClients)
// applies to that cluster only.
func TestBuildCIDRIgnoredByUrllib(t *testing.T) {
	const noProxy = "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,10.0.0.0/18"
	cluster := func(k diagnose.Key, clients []noproxy.Client) digest.Cluster {
		s := hc(noProxy)
		s.ServiceNetwork, s.ClusterNetwork = []string{"10.0.0.0/18"}, nil
		return digest.Cluster{Key: k, HostedCluster: s, Clients: clients}
	}
	ignored := func(r digest.ClusterReport) string {
		for _, f := range r.Findings {
			if f.Code == noproxy.CodeIgnoredByClients && f.Entry == "10.0.0.0/18" {
				return f.Reason
			}
		}
		return ""
	}
	d := digest.Build(t0, digest.Input{Clusters: []digest.Cluster{cluster(keyBad, nil), cluster(keyGood, goCurlRequests)}})
	if r := ignored(report(t, d, keyBad)); !strings.Contains(r, "not urllib") {
		t.Errorf("default families: finding %q, want 10.0.0.0/18 not protecting urllib", r)
	}
	if r := report(t, d, keyGood); ignored(r) != "" || !r.Compliant() {
		t.Errorf("go, curl, requests (this cluster only): findings %+v, want none", r.Findings)
	}
	d = digest.Build(t0, digest.Input{Clients: goCurlRequests, Clusters: []digest.Cluster{cluster(keyBad, nil)}})
	if r := report(t, d, keyBad); ignored(r) != "" {
		t.Errorf("go, curl, requests (global): unexpected %q", ignored(r))
	}
}
