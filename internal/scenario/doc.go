// Package scenario builds the seed incidents on real API servers: HostedClusters
// behind a proxy, NodePools, hosted Nodes going NotReady, the crashlooping
// service-ca-operator, kube-apiserver-proxy pods and KubeVirt virt-launcher
// pods. Tests and `hcpbot demo` drive the same builders.
//
// scenario.go is over 450 lines: one builder a kind of seed object
// (HostedCluster, NodePool, Node, the service-ca-operator, the
// kube-apiserver-proxy, virt-launcher pods), each shaped like what the real
// system writes; the builders read in the order a scenario creates them. The other files are scenarios made of them.
package scenario
