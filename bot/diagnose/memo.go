package diagnose

import (
	"slices"
	"strings"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

// memo remembers a Cluster's HyperShift verdicts and noProxy fixes. They
// depend on the HostedCluster's spec only, which changes rarely, while
// the correlator diagnoses on every event: without it, applying
// HyperShift's rules dominated the bot's CPU (make bench, B1).
type memo struct {
	verdicts map[verdictKey]verdict
	fixes    map[fixKey]*Fix
	steps    map[string][]string
	families map[familiesKey][]string
}

// memoSize bounds each map: a Cluster is diagnosed with its current spec
// and the few of its recent changes.
const memoSize = 16

// verdictKey is everything decide reads.
type verdictKey struct {
	proxy             bool
	version, platform string
	in                noproxy.HyperShiftInput
}

// fixKey is everything noProxyFix reads.
type fixKey struct {
	target, field                         string
	httpProxy, httpsProxy, noProxy, ca    string
	service, cluster, machine, platform   string
	endpoint, apiServer                   event.Endpoint
	hasEndpoint, hasAPIServer             bool
	serviceCount, clusterCount, machCount int
	extra                                 string // noProxyFix's extra entries, joined
}

// familiesKey is everything proxiedFamiliesOf reads.
type familiesKey struct {
	ip, noProxy string
	clients     string // the families, in order
}

// familiesThrough is proxiedFamiliesOf, remembered: once a cluster's
// noProxy was edited, riskyProxyChange asks it on every later event of
// the cluster, for every client family (B6: a third of a replay's CPU).
// The slice is shared: callers only read it.
func (c *Cluster) familiesThrough(ip, noProxy string, clients []noproxy.Client) []string {
	var cl strings.Builder
	for _, f := range clients {
		cl.WriteString(f.String())
		cl.WriteByte(',')
	}
	k := familiesKey{ip: ip, noProxy: noProxy, clients: cl.String()}
	if fams, ok := c.memo.families[k]; ok {
		return fams
	}
	fams := proxiedFamiliesOf(ip, noProxy, clients)
	if c.memo.families == nil || len(c.memo.families) >= memoSize {
		c.memo.families = make(map[familiesKey][]string, 4)
	}
	c.memo.families[k] = fams
	return fams
}

// decide is the package's decide, remembered.
func (c *Cluster) decide(hc event.HostedClusterState, spec event.ProxySpec) verdict {
	k := verdictKey{proxy: strings.TrimSpace(spec.HTTPSProxy) != "", version: hc.Version, platform: hc.Platform, in: hyperShiftInput(hc, spec.NoProxy)}
	if v, ok := c.memo.verdicts[k]; ok {
		return v
	}
	v := decide(hc, spec)
	v.text = v.explain()
	if c.memo.verdicts == nil || len(c.memo.verdicts) >= memoSize {
		c.memo.verdicts = make(map[verdictKey]verdict, 4)
	}
	c.memo.verdicts[k] = v
	return v
}

// noProxyFix is the package's noProxyFix, remembered. Each caller gets
// its own copy of the Fix; the slices in it are shared and never written.
func (c *Cluster) noProxyFix(target, field string, spec event.ProxySpec, hc event.HostedClusterState, extra ...string) *Fix {
	k := fixKey{target: target, field: field,
		httpProxy: spec.HTTPProxy, httpsProxy: spec.HTTPSProxy, noProxy: spec.NoProxy, ca: spec.TrustedCA,
		// Joined, the networks compare as one string; the counts keep
		// ["a,b"] and ["a","b"] apart.
		service: strings.Join(hc.ServiceNetwork, ","), cluster: strings.Join(hc.ClusterNetwork, ","), machine: strings.Join(hc.MachineNetwork, ","),
		serviceCount: len(hc.ServiceNetwork), clusterCount: len(hc.ClusterNetwork), machCount: len(hc.MachineNetwork),
		platform: hc.Platform, extra: strings.Join(extra, "\x00")}
	if ep := hc.ControlPlaneEndpoint; ep != nil {
		k.endpoint, k.hasEndpoint = *ep, true
	}
	if a := hc.APIServer; a != nil {
		k.apiServer, k.hasAPIServer = *a, true
	}
	f, ok := c.memo.fixes[k]
	if !ok {
		f = noProxyFix(target, field, spec, hc, extra...)
		if c.memo.fixes == nil || len(c.memo.fixes) >= memoSize {
			c.memo.fixes = make(map[fixKey]*Fix, 2)
		}
		c.memo.fixes[k] = f
	}
	if f == nil {
		return nil
	}
	cp := *f
	return &cp
}

// fixSteps is noProxyFixSteps, remembered; the caller may append to the
// slice it gets.
func (c *Cluster) fixSteps(f *Fix, spec event.ProxySpec) []string {
	if f == nil {
		return nil
	}
	k := f.After + "\x00" + spec.NoProxy + "\x00" + strings.Join(f.Add, ",")
	steps, ok := c.memo.steps[k]
	if !ok {
		steps = c.noProxyFixSteps(f, spec)
		if c.memo.steps == nil || len(c.memo.steps) >= memoSize {
			c.memo.steps = make(map[string][]string, 2)
		}
		c.memo.steps[k] = steps
	}
	return slices.Clone(steps)
}
