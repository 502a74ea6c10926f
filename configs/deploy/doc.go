// Package deploy holds hcpbot's Kubernetes manifests (kustomizations in
// agent/, bot/ and nats/) and their tests: deploy_test.go renders them with
// kustomize, checks their structure, applies them to a real API server and
// runs the agent with exactly the permissions agent/rbac.yaml grants. It
// has no Go API.
package deploy
