package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An audit log line as kube-apiserver v1.37 writes it with AuditPolicy:
// the agent's ServiceAccount patching a HostedCluster as alice.
const auditLine = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"624039c6-ba91-4b56-a74f-e5b209c3aeba","stage":"ResponseComplete","requestURI":"/apis/hypershift.openshift.io/v1beta1/namespaces/clusters/hostedclusters/proxied?fieldManager=hcpbot","verb":"patch","user":{"username":"system:serviceaccount:hcpbot:hcpbot-agent","uid":"86c54e1b-b3e5-4bea-be0a-7d09ad143bb4","groups":["system:serviceaccounts","system:serviceaccounts:hcpbot","system:authenticated"],"extra":{"authentication.kubernetes.io/credential-id":["JTI=17421c2a-2a35-4a35-8864-0683ca7cea0a"]}},"impersonatedUser":{"username":"alice","groups":["ops","system:authenticated"],"extra":{"hcpbot.io/action":["fix-imp0001"],"hcpbot.io/approved-by":["UALICE0001"],"hcpbot.io/requested-by":["UREQUESTER1"]}},"sourceIPs":["127.0.0.1"],"userAgent":"actions.test/v0.0.0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"hostedclusters","namespace":"clusters","name":"proxied","apiGroup":"hypershift.openshift.io","apiVersion":"v1beta1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-12-06T07:13:58.224368Z","stageTimestamp":"2026-12-06T07:13:58.227238Z","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed by RoleBinding \"test-alice-hostedclusters/clusters\" of Role \"test-alice-hostedclusters\" to User \"alice\""}}`

// AuditEvents reads complete lines only (the API server may be writing
// the last one), and a log not written yet is no events.
func TestAuditEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if evs, err := AuditEvents(path); err != nil || len(evs) != 0 {
		t.Fatalf("no log yet: %v, %v", evs, err)
	}
	partial := auditLine[:len(auditLine)/2]
	if err := os.WriteFile(path, []byte(auditLine+"\n"+partial), 0o600); err != nil {
		t.Fatal(err)
	}
	evs, err := AuditEvents(path)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %+v, %v; want the complete line only", evs, err)
	}
	e := evs[0]
	if e.Verb != "patch" || e.Stage != "ResponseComplete" || e.User.Username != "system:serviceaccount:hcpbot:hcpbot-agent" ||
		e.ImpersonatedUser == nil || e.ImpersonatedUser.Username != "alice" || e.ImpersonatedUser.Extra["hcpbot.io/action"][0] != "fix-imp0001" ||
		e.ObjectRef == nil || e.ObjectRef.Resource != "hostedclusters" || e.ObjectRef.Name != "proxied" ||
		e.ResponseStatus == nil || e.ResponseStatus.Code != 200 || e.StageTimestamp.IsZero() {
		t.Errorf("event %+v", e)
	}
	if err := os.WriteFile(path, []byte("not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := AuditEvents(path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("garbage: %v", err)
	}
}
