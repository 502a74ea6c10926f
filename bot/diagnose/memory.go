package diagnose

import (
	"unsafe"

	"github.com/hcpbot/hcpbot/event"
)

// ApproxBytes estimates the heap held by c: struct sizes from the compiler
// (unsafe.Sizeof only, no pointer tricks), string contents, and map slots
// at the load factor of Go's maps. It is meant for capacity planning and
// metrics, not for accounting to the byte; TestApproxBytesTracksHeap keeps
// it within a factor of what the runtime reports.
func (c *Cluster) ApproxBytes() int {
	n := int(unsafe.Sizeof(*c)) + len(c.key.Source) + len(c.key.Cluster.Namespace) + len(c.key.Cluster.Name)
	if c.hc.present {
		n += hcBytes(c.hc.p) + refBytes(c.hc.ref) + len(c.hc.st.id)
	}
	n += cap(c.changes) * int(unsafe.Sizeof(proxyChange{}))
	for _, ch := range c.changes {
		n += len(ch.st.id) + len(ch.object) + specBytes(ch.old) + specBytes(ch.new) + stringsBytes(ch.added) + stringsBytes(ch.removed)
	}
	n += tableBytes(c.nodePools, func(r nodePoolRec) int {
		return len(r.namespace) + len(r.name) + condsBytes(r.conds) + len(r.pausedUntil)
	})
	n += tableBytes(c.nodes, func(r nodeRec) int {
		return len(r.name) + len(r.reason) + len(r.message) + len(r.ip)
	})
	n += tableBytes(c.crashes, func(r crashRec) int {
		return len(r.namespace) + len(r.pod) + len(r.container) + len(r.waiting) + len(r.sig) + len(r.line)
	})
	n += tableBytes(c.apiProxies, func(r apiProxyRec) int {
		return len(r.pod) + len(r.node) + len(r.mode) + len(r.connectMessage)
	})
	n += tableBytes(c.launchers, func(r launcherRec) int {
		return len(r.namespace) + len(r.pod) + len(r.vmi) + len(r.node) + len(r.ip) + len(r.phase) + len(r.nodePool)
	})
	n += tableBytes(c.reach, func(r reachRec) int { return len(r.endpoint) + len(r.err) })
	n += tableBytes(c.summary, func(event.NodeSummary) int { return 0 })
	n += tableBytes(c.apiServices, func(r apiServiceRec) int {
		return len(r.name) + len(r.service) + len(r.available) + len(r.reason) + len(r.message)
	})
	n += tableBytes(c.connectivity, func(r connectivityRec) int { return len(r.raw) })
	n += tableBytes(c.ocp, func(r ocpRec) int {
		return specBytes(r.spec) + len(r.status.HTTPProxy) + len(r.status.HTTPSProxy) + len(r.status.NoProxy)
	})
	return n
}

// mapHeader approximates a Go map's header and directory.
const mapHeader = 64

func tableBytes[R any](t table[R], strs func(R) int) int {
	if t == nil {
		return 0
	}
	var k string
	var p *entry[R]
	// Swiss-table maps keep slots in groups of 8 with one control byte
	// each and grow by doubling at 7/8 load.
	slots := 8
	for slots*7/8 < len(t) {
		slots *= 2
	}
	n := mapHeader + slots*(int(unsafe.Sizeof(k)+unsafe.Sizeof(p))+1)
	for key, e := range t {
		n += len(key) + int(unsafe.Sizeof(*e)) + len(e.st.id) + refBytes(e.ref)
		if !e.gone {
			n += strs(e.rec)
		}
	}
	return n
}

func refBytes(r objRef) int { return len(r.kind) + len(r.namespace) + len(r.name) + len(r.uid) }

func specBytes(s event.ProxySpec) int {
	return len(s.HTTPProxy) + len(s.HTTPSProxy) + len(s.NoProxy) + len(s.TrustedCA) + stringsBytes(s.ReadinessEndpoints)
}

func stringsBytes(ss []string) int {
	n := cap(ss) * int(unsafe.Sizeof(""))
	for _, s := range ss {
		n += len(s)
	}
	return n
}

func condsBytes(cs []event.Condition) int {
	n := cap(cs) * int(unsafe.Sizeof(event.Condition{}))
	for _, c := range cs {
		n += len(c.Type) + len(c.Status) + len(c.Severity) + len(c.Reason) + len(c.Message)
	}
	return n
}

func hcBytes(p event.HostedClusterState) int {
	n := len(p.Platform) + len(p.InfraID) + len(p.Version) + specBytes(p.Proxy) + len(p.NetworkType) +
		stringsBytes(p.ClusterNetwork) + stringsBytes(p.ServiceNetwork) + stringsBytes(p.MachineNetwork) +
		len(p.KubeconfigSecret) + condsBytes(p.Conditions) + len(p.IgnitionEndpoint) + len(p.KonnectivityEndpoint) +
		len(p.PausedUntil)
	if b := p.TrustedCA; b != nil {
		n += int(unsafe.Sizeof(*b)) + len(b.ConfigMap) + len(b.Problem) + len(b.Subject)
	}
	for _, e := range []*event.Endpoint{p.APIServer, p.ControlPlaneEndpoint} {
		if e != nil {
			n += int(unsafe.Sizeof(*e)) + len(e.Host)
		}
	}
	return n
}
