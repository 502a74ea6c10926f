package digest_test

import (
	"strings"
	"testing"

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
