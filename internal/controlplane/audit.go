package controlplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditPolicy is the audit policy of an API server started with
// Options.AuditLog: the writes of HostedClusters, Proxies and Services at
// Metadata level (who, as whom, what, the answer), and nothing else, so
// the log stays small while every test writes to the server. The
// RequestReceived stage is left out: one event per request, once answered.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
  resources:
  - group: hypershift.openshift.io
    resources: [hostedclusters]
  - group: config.openshift.io
    resources: [proxies]
  - group: ""
    resources: [services]
- level: None
`

// auditLog writes the policy into dir and returns the API server's flags
// and the log's path. Blocking mode (the default): an event is written
// in the request's own goroutine, before the server is done with it, so
// a test polls only for the write to reach the file, never for a batch.
func auditLog(dir string) (args []string, path string, err error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(AuditPolicy), 0o600); err != nil {
		return nil, "", err
	}
	path = filepath.Join(dir, "audit.log")
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + path,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		// Test data: never rotated, never compressed.
		"--audit-log-maxsize=0",
	}, path, nil
}

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests read (the
// fields of k8s.io/apiserver's auditv1.Event, without depending on it).
type AuditEvent struct {
	Level            string                     `json:"level"`
	AuditID          string                     `json:"auditID"`
	Stage            string                     `json:"stage"`
	RequestURI       string                     `json:"requestURI"`
	Verb             string                     `json:"verb"`
	User             authenticationv1.UserInfo  `json:"user"`
	ImpersonatedUser *authenticationv1.UserInfo `json:"impersonatedUser,omitempty"`
	UserAgent        string                     `json:"userAgent,omitempty"`
	ObjectRef        *AuditObjectReference      `json:"objectRef,omitempty"`
	ResponseStatus   *metav1.Status             `json:"responseStatus,omitempty"`
	Annotations      map[string]string          `json:"annotations,omitempty"`
	// AuthenticationMetadata.ImpersonationConstraint is the verb that let
	// the impersonation pass (constrained impersonation, Kubernetes 1.35+).
	AuthenticationMetadata *struct {
		ImpersonationConstraint string `json:"impersonationConstraint,omitempty"`
	} `json:"authenticationMetadata,omitempty"`
	StageTimestamp  metav1.MicroTime `json:"stageTimestamp"`
	RequestReceived metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// AuditObjectReference is an audit Event's objectRef.
type AuditObjectReference struct {
	Resource        string `json:"resource,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid,omitempty"`
	APIGroup        string `json:"apiGroup,omitempty"`
	APIVersion      string `json:"apiVersion,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Subresource     string `json:"subresource,omitempty"`
}

// AuditEvents reads the audit log at path (AuditLogPath): every complete
// line, in the order written. A last line still being written is left for
// the next read; a missing file is no events yet.
func AuditEvents(path string) ([]AuditEvent, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	} else {
		return nil, nil
	}
	var out []AuditEvent
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev AuditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("audit log %s line %d: %w", path, n+1, err)
		}
		out = append(out, ev)
	}
	return out, nil
}
