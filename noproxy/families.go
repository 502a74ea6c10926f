package noproxy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/hcpbot/hcpbot/redact"
)

// Finding codes of LintClients.
const (
	// CodeIgnoredByClients: an entry that some of the families never match
	// for the destinations it names (a CIDR for urllib, wget and node; a
	// plain name for node's subdomains; "*.name" for curl, Python, wget).
	CodeIgnoredByClients = "ignored-by-some-clients"
	// CodeListForAllClients: the noProxy value that protects the same
	// destinations in every selected family, as far as they can express it.
	CodeListForAllClients = "list-for-all-clients"
)

// DisplayName is the family's name in findings: requests for Python,
// urllib/Ansible for Urllib.
func (c Client) DisplayName() string {
	switch c {
	case Go:
		return "Go"
	case Python:
		return "requests"
	case Urllib:
		return "urllib/Ansible"
	}
	return c.String()
}

// entryProbes returns the URLs an entry is written to exempt, read the Go
// way (the list's intent): the name and a subdomain, an address, the
// first address of a network. Entries without a clear target (wildcards,
// invalid ones) have none.
func entryProbes(e Entry) []string {
	switch e.Kind {
	case KindCIDR:
		if !e.Prefix.IsValid() || e.Prefix.Bits() == 0 {
			return nil
		}
		a := e.Prefix.Masked().Addr()
		if e.Prefix.Bits() < a.BitLen() {
			a = a.Next()
		}
		return []string{"http://" + bracketHost(a.String()) + "/"}
	case KindIP:
		return []string{"http://" + bracketHost(e.Host) + "/"}
	case KindIPPort:
		return []string{"http://" + bracketHost(e.Host) + ":" + e.Port + "/"}
	case KindDomain:
		if !strings.Contains(e.Host, ".") {
			return []string{"http://" + e.Host + "/"} // a single label names one host
		}
		return []string{"http://" + e.Host + "/", "http://www." + e.Host + "/"}
	case KindDotDomain, KindStarDomain:
		return []string{"http://www." + e.Host + "/"}
	case KindHostPort:
		if strings.HasPrefix(e.Text, ".") || strings.HasPrefix(e.Text, "*.") {
			return []string{"http://www." + e.Host + ":" + e.Port + "/"}
		}
		return []string{"http://" + e.Host + ":" + e.Port + "/"}
	}
	return nil
}

// entrySuggestions are the entries to add so that the other families
// exempt what e names.
func entrySuggestions(e Entry, c ClusterProxy) []string {
	switch e.Kind {
	case KindCIDR:
		return cidrAddresses(e.Prefix, c.ServiceCIDRs)
	case KindIP:
		if e.Addr.Is6() {
			return []string{e.Addr.String(), "[" + e.Addr.String() + "]"}
		}
	case KindIPPort:
		if e.Addr.Is6() {
			return []string{e.Addr.String(), "[" + e.Addr.String() + "]"}
		}
		return []string{e.Host}
	case KindDomain:
		return []string{"." + e.Host}
	case KindStarDomain:
		return []string{"." + e.Host}
	case KindHostPort:
		if strings.HasPrefix(e.Text, ".") || strings.HasPrefix(e.Text, "*.") {
			return []string{"." + e.Host}
		}
		return []string{e.Host}
	}
	return nil
}

// cidrAddresses spells out what the families without CIDR support can
// list instead: every address of a network of at most 8 addresses, else
// the first address when the network is a service network (the kubernetes
// Service IP that in-cluster clients dial).
func cidrAddresses(p netip.Prefix, serviceCIDRs []string) []string {
	if !p.IsValid() {
		return nil
	}
	p = p.Masked()
	var out []string
	if host := p.Addr().BitLen() - p.Bits(); host <= 3 {
		for a := p.Addr(); p.Contains(a); a = a.Next() {
			out = append(out, a.String())
			if a.Is6() {
				out = append(out, "["+a.String()+"]")
			}
		}
		return out
	}
	for _, s := range serviceCIDRs {
		if sp, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil && sp.Masked() == p {
			a := p.Addr().Next().String()
			out = append(out, a)
			if p.Addr().Is6() {
				out = append(out, "["+a+"]")
			}
		}
	}
	return out
}

// unprotected returns, of clients, those that send one of urls through
// the proxy under noProxy, with the first such URL.
func unprotected(noProxy string, urls []string, clients []Client) (miss []Client, at map[Client]string) {
	at = map[Client]string{}
	for _, cl := range clients {
		for _, u := range urls {
			if d, err := Decide(cl, noProxy, u); err == nil && d == Proxy {
				miss = append(miss, cl)
				at[cl] = u
				break
			}
		}
	}
	return miss, at
}

func clientNames(cs []Client) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.DisplayName()
	}
	return strings.Join(names, ", ")
}

// LintClients names the entries of the cluster's noProxy that some of the
// given families ignore for the destinations the entry names (Go's reading
// is taken as the intent), and proposes the list that protects all of them
// as far as they can express it. A cluster without a proxy yields nothing.
func LintClients(c ClusterProxy, clients []Client) []Finding {
	if !c.hasProxy() || len(clients) == 0 {
		return nil
	}
	var fs []Finding
	var add []string
	for _, e := range Parse(c.NoProxy) {
		probes := entryProbes(e)
		if len(probes) == 0 {
			continue
		}
		if miss, _ := unprotected(e.Text, probes, []Client{Go}); len(miss) > 0 {
			continue // not even Go reads it as the entry looks; lintEntries explains it
		}
		miss, at := unprotected(e.Text, probes, clients)
		if len(miss) == 0 {
			continue
		}
		var ok []Client
		for _, cl := range clients {
			if _, bad := at[cl]; !bad {
				ok = append(ok, cl)
			}
		}
		// Group the families by the URL they proxy, in order.
		var urls []string
		byURL := map[string][]Client{}
		for _, cl := range miss {
			if byURL[at[cl]] == nil {
				urls = append(urls, at[cl])
			}
			byURL[at[cl]] = append(byURL[at[cl]], cl)
		}
		var why []string
		for _, u := range urls {
			why = append(why, fmt.Sprintf("%s for %s", clientNames(byURL[u]), u))
		}
		reason := fmt.Sprintf("`%s` protects %s; not %s (proxied: %s)", e.Text,
			orNone(clientNames(ok)), clientNames(miss), strings.Join(why, "; "))
		sugg := entrySuggestions(e, c)
		still, _ := unprotected(Merge(e.Text, sugg), probes, clients)
		fix := ""
		if len(sugg) > 0 {
			fix = "also list " + strings.Join(sugg, ",")
			add = append(add, sugg...)
		}
		if len(still) > 0 {
			if e.Kind == KindCIDR {
				if fix != "" {
					fix += "; "
				}
				fix += fmt.Sprintf("%s have no CIDR support: list the addresses they dial, or make them dial names covered by .svc/.cluster.local", clientNames(still))
			} else {
				fix += fmt.Sprintf("; %s cannot express it", clientNames(still))
			}
		}
		fs = append(fs, Finding{SeverityWarning, CodeIgnoredByClients, e.Text, reason, strings.TrimPrefix(fix, "; ")})
	}
	if len(fs) > 0 {
		if list := Merge(c.NoProxy, add); list != Merge(c.NoProxy, nil) {
			fs = append(fs, Finding{SeverityInfo, CodeListForAllClients, list,
				"this noProxy protects the same destinations for " + clientNames(clients) + " as far as each can express it (the original entries stay for the clients that read them)",
				"use it as noProxy / NO_PROXY"})
		}
	}
	for i := range fs {
		fs[i].Entry = redact.RedactText(fs[i].Entry)
		fs[i].Reason = redact.RedactText(fs[i].Reason)
		fs[i].Fix = redact.RedactText(fs[i].Fix)
	}
	return fs
}

// SortBySeverity orders findings most severe first, keeping the order of
// equally severe ones (Lint's findings followed by LintClients' stay
// grouped within a severity).
func SortBySeverity(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Severity.rank() < fs[j].Severity.rank() })
}

func orNone(s string) string {
	if s == "" {
		return "none of them"
	}
	return s
}
