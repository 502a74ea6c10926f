// Package deploy holds hcpbot's Kubernetes manifests (kustomizations in
// agent/, agent/clusters/, bot/ and nats/) and their tests: deploy_test.go
// renders them with kustomize, checks their structure, applies them to a
// real API server (and to fresh ones, in every order) and runs the agent
// with exactly the permissions agent/rbac.yaml grants; shipped_test.go runs
// the rendered deployment itself — nats-server, agent and bot processes
// with the pods' args, environment and files — and takes seed 000's fix
// through it; versions_test.go keeps the image tags on the release and on
// go.mod's nats-server. It has no Go API.
package deploy
