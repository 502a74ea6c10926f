package noproxy

import (
	"net"
	"net/netip"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// The Go family follows golang.org/x/net v0.62.0 http/httpproxy/proxy.go
// (config.init, useProxy, canonicalAddr and the matchers) statement by
// statement, so that the matched entry can be reported; a fuzz test keeps it
// identical to httpproxy.Config.ProxyFunc. The rules, odd corners included:
//
//   - entries are split at ",", trimmed and lower-cased; a "*" entry
//     anywhere disables the proxy for every URL;
//   - CIDR entries (IPv4 or IPv6) match IP-literal hosts only;
//   - "ip" and "ip:port" / "[ipv6]:port" entries match equal addresses
//     (net.IP.Equal, so ::ffff:10.0.0.1 equals 10.0.0.1), on any port or
//     on the given port only;
//   - "name" matches the name and its subdomains, ".name" subdomains only,
//     "*.name" is read as ".name"; "name:port" restricts the port; name
//     entries never match an IP-literal host; non-ASCII names are compared
//     in punycode;
//   - the port compared is the URL's, or 80/443 from the scheme;
//   - the host "localhost" (exactly, case-sensitive) and loopback
//     addresses are always direct, whatever NO_PROXY says.
//   - an address that net.SplitHostPort cannot split is direct (useProxy
//     returns false).

type goMatcher struct {
	entry string // as written, for the verdict
	all   bool   // "*"
	cidr  *net.IPNet
	ip    net.IP
	host  string // domain, with leading "."
	port  string
	// matchHost: the entry had no leading "." so the bare name matches too.
	matchHost bool
}

func goCompile(noProxy string) (ipMatchers, domainMatchers []goMatcher) {
	for _, raw := range strings.Split(noProxy, ",") {
		p := strings.ToLower(strings.TrimSpace(raw))
		if len(p) == 0 {
			continue
		}
		written := strings.TrimSpace(raw)
		if p == "*" {
			all := []goMatcher{{entry: written, all: true}}
			return all, all
		}
		if _, pnet, err := net.ParseCIDR(p); err == nil {
			ipMatchers = append(ipMatchers, goMatcher{entry: written, cidr: pnet})
			continue
		}
		phost, pport, err := net.SplitHostPort(p)
		if err == nil {
			if len(phost) == 0 {
				continue
			}
			if phost[0] == '[' && phost[len(phost)-1] == ']' {
				phost = phost[1 : len(phost)-1]
			}
		} else {
			phost = p
		}
		if pip := net.ParseIP(phost); pip != nil {
			ipMatchers = append(ipMatchers, goMatcher{entry: written, ip: pip, port: pport})
			continue
		}
		if len(phost) == 0 {
			continue
		}
		if strings.HasPrefix(phost, "*.") {
			phost = phost[1:]
		}
		matchHost := false
		if phost[0] != '.' {
			matchHost = true
			phost = "." + phost
		}
		if v, err := goIDNA(phost); err == nil {
			phost = v
		}
		domainMatchers = append(domainMatchers, goMatcher{entry: written, host: phost, port: pport, matchHost: matchHost})
	}
	return ipMatchers, domainMatchers
}

func (m goMatcher) match(host, port string, ip net.IP) bool {
	switch {
	case m.all:
		return true
	case m.cidr != nil:
		return m.cidr.Contains(ip)
	case m.ip != nil:
		return m.ip.Equal(ip) && (m.port == "" || m.port == port)
	}
	if ip != nil {
		return false
	}
	if strings.HasSuffix(host, m.host) || (m.matchHost && host == m.host[1:]) {
		return m.port == "" || m.port == port
	}
	return false
}

func goDecide(noProxy string, u *url.URL) Verdict {
	addr := goCanonicalAddr(u)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return direct("", "Go cannot split the address and connects directly")
	}
	if host == "localhost" {
		return direct("", "Go always connects to localhost directly")
	}
	var ip net.IP
	if nip, err := netip.ParseAddr(host); err == nil {
		ip = net.IP(nip.AsSlice())
		if ip.IsLoopback() {
			return direct("", "Go always connects to loopback addresses directly")
		}
	}
	host = strings.ToLower(strings.TrimSpace(host))
	ipMatchers, domainMatchers := goCompile(noProxy)
	if ip != nil {
		for _, m := range ipMatchers {
			if m.match(host, port, ip) {
				return direct(m.entry, goWhy(m))
			}
		}
	}
	for _, m := range domainMatchers {
		if m.match(host, port, ip) {
			return direct(m.entry, goWhy(m))
		}
	}
	return proxied(whyNoMatch)
}

func goWhy(m goMatcher) string {
	switch {
	case m.all:
		return "a \"*\" entry disables the proxy for every host"
	case m.cidr != nil:
		return "the address is inside the CIDR"
	case m.ip != nil:
		return "the address equals the entry"
	case m.matchHost:
		return "the host is the entry's name or a subdomain of it"
	}
	return "the host is a subdomain of the entry"
}

// goDefaultPort is httpproxy's portMap.
func goDefaultPort(scheme string) string {
	switch scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	case "socks5":
		return "1080"
	}
	return ""
}

// goCanonicalAddr is httpproxy's canonicalAddr.
func goCanonicalAddr(u *url.URL) string {
	addr := u.Hostname()
	if v, err := goIDNA(addr); err == nil {
		addr = v
	}
	port := u.Port()
	if port == "" {
		port = goDefaultPort(u.Scheme)
	}
	return net.JoinHostPort(addr, port)
}

// goIDNA is httpproxy's idnaASCII: ASCII passes untouched.
func goIDNA(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		if v[i] >= utf8.RuneSelf {
			return idna.Lookup.ToASCII(v)
		}
	}
	return v, nil
}
