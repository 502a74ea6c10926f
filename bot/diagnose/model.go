package diagnose

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/hcpbot/hcpbot/event"
)

// Model holds the Clusters of every source and routes events to them. It
// is not safe for concurrent use.
type Model struct {
	clusters map[Key]*Cluster
	clients  ClientsFunc
}

// SetClients sets how every Cluster of m, present and future, finds its
// workloads' NO_PROXY client families (the risky-proxy-change rule judges
// by them); nil means noproxy.DefaultClients.
func (m *Model) SetClients(f ClientsFunc) {
	m.clients = f
	for _, c := range m.clusters {
		c.SetClients(f)
	}
}

// NewModel returns an empty Model.
func NewModel() *Model { return &Model{clusters: map[Key]*Cluster{}} }

// Apply decodes e and applies it to the Cluster of its scope, creating it
// on first sight. A management-scope SnapshotDone goes to the management
// scope and to every hosted cluster of the source, since it covers
// HostedClusters, NodePools and virt-launcher pods. It returns the keys
// whose state changed, sorted. The error wraps event.ErrMalformed or
// event.ErrUnknownType from decoding; nothing is applied then.
func (m *Model) Apply(e event.Event) ([]Key, error) {
	p, err := e.DecodePayload()
	if err != nil {
		return nil, fmt.Errorf("diagnose: event %s (%s): %w", e.ID, e.Type, err)
	}
	return m.ApplyDecoded(e, p), nil
}

// ApplyDecoded is Apply with the payload already decoded
// (event.DecodeAll).
func (m *Model) ApplyDecoded(e event.Event, p event.Payload) []Key {
	k := KeyOf(e)
	c := m.clusters[k]
	if c == nil {
		c = NewCluster(k)
		c.SetClients(m.clients)
		m.clusters[k] = c
	}
	var changed []Key
	if c.Apply(e, p) {
		changed = append(changed, k)
	}
	if _, ok := p.(event.SnapshotDone); ok && k.Management() {
		for hk, hc := range m.clusters {
			if hk.Source == k.Source && !hk.Management() && hc.Apply(e, p) {
				changed = append(changed, hk)
			}
		}
	}
	slices.SortFunc(changed, compareKeys)
	return changed
}

// Cluster returns the Cluster of k, or nil.
func (m *Model) Cluster(k Key) *Cluster { return m.clusters[k] }

// Keys returns every key, sorted.
func (m *Model) Keys() []Key {
	out := make([]Key, 0, len(m.clusters))
	for k := range m.clusters {
		out = append(out, k)
	}
	slices.SortFunc(out, compareKeys)
	return out
}

// Forget drops the Cluster of k, e.g. some time after it is Gone. A late
// event about it creates a fresh Cluster.
func (m *Model) Forget(k Key) { delete(m.clusters, k) }

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Cluster.Namespace, b.Cluster.Namespace), cmp.Compare(a.Cluster.Name, b.Cluster.Name))
}
