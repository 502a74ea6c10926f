// Package testenv gives integration tests the real parts, started by the
// tests themselves:
//
//   - Kubernetes: etcd and kube-apiserver built from module source (cached per
//     user by hack/testenv/build.sh), one control plane per test package,
//     with the HyperShift and OpenShift CRDs installed. Extra API servers play
//     hosted clusters and are reached, like in HyperShift, through an admin
//     kubeconfig Secret named by the HostedCluster's status.kubeconfig.name.
//   - NATS: package natstest (embedded JetStream server; 3-node cluster).
//   - Slack: package slackrec (Web API recorder on slacktest; signed requests;
//     Block Kit limits enforced), package golden (Block Kit JSON of each
//     message kind in testdata/golden, checked against the same limits).
//
// A test package opts in with a TestMain:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { testenv.Main(m, &env) }
//
//	func TestSomething(t *testing.T) {
//		env.Need(t)                                   // skips under -short
//		ns := env.Namespace(t)                        // a fresh namespace
//		hc := env.HostedCluster(t, scenario.BehindProxy(ns, "example"))
//		nodes, _ := scenario.Nodes(ctx, hc.Kube, "example-np", 3)
//		js := natstest.RunServer(t)                   // embedded JetStream
//		slack := slackrec.New(t)                      // Slack Web API recorder
//		...
//	}
//
// Integration tests are skipped with -short, so `go test -short ./...` runs
// the unit tests alone; `make test` runs everything.
package testenv
