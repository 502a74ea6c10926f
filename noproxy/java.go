package noproxy

import (
	"fmt"
	"strings"
)

// Java ignores NO_PROXY: java.net's DefaultProxySelector reads the system
// property http.nonProxyHosts (shared by http and https), usually passed
// in JAVA_TOOL_OPTIONS. Its value is a "|"-separated list of patterns, each
// matched case-insensitively against the whole URI host; a pattern may
// start and/or end with "*", which matches any characters. IPv6 hosts are
// matched with their brackets and as written ("[2001:db8::1]" does not
// match "[2001:db8:0::1]"). Loopback hosts are always direct (JDK 17), and
// setting the property replaces the JDK's default list.
//
// JavaNonProxyHosts translates a NO_PROXY list read the Go way (the
// reference family) into that value where Java can express it:
//   - "name" → "name|*.name"; ".name" and "*.name" → "*.name";
//   - IPv4 and IPv6 addresses → the address (IPv6 in brackets, canonical);
//   - IPv4 CIDRs on an octet boundary → "10.*", "10.1.*", "10.1.2.*";
//     /32 → the address;
//   - "*" → "*".
// Other CIDRs have no glob form and ports cannot be expressed: such
// entries are reported; entries with a port are translated without it
// (Java then bypasses every port of that host) and reported too.

// JavaTranslation is the result of JavaNonProxyHosts.
type JavaTranslation struct {
	// NonProxyHosts is the http.nonProxyHosts value.
	NonProxyHosts string `json:"nonProxyHosts"`
	// Notes lists the entries Java cannot express exactly.
	Notes []JavaNote `json:"notes,omitempty"`
}

// JavaNote is one entry Java cannot express with the same meaning.
type JavaNote struct {
	Entry string `json:"entry"`
	// Dropped is true when nothing was emitted for the entry; false when
	// an approximation (Translated) was.
	Dropped    bool   `json:"dropped"`
	Translated string `json:"translated,omitempty"`
	Reason     string `json:"reason"`
}

// JavaNonProxyHosts translates noProxy; see the rules above.
func JavaNonProxyHosts(noProxy string) JavaTranslation {
	var out JavaTranslation
	var patterns []string
	seen := map[string]bool{}
	emit := func(ps ...string) {
		for _, p := range ps {
			if k := strings.ToLower(p); !seen[k] {
				seen[k] = true
				patterns = append(patterns, p)
			}
		}
	}
	note := func(e Entry, translated []string, reason string) {
		out.Notes = append(out.Notes, JavaNote{Entry: e.Text, Dropped: len(translated) == 0,
			Translated: strings.Join(translated, "|"), Reason: reason})
	}
	for _, e := range Parse(noProxy) {
		switch e.Kind {
		case KindWildcard:
			emit("*")
		case KindDomain:
			emit(e.Host, "*."+e.Host)
		case KindDotDomain, KindStarDomain:
			emit("*." + e.Host)
		case KindIP:
			emit(javaAddr(e))
		case KindCIDR:
			if p, ok := javaCIDR(e); ok {
				emit(p)
			} else {
				note(e, nil, "Java has no CIDR matching: only IPv4 networks on an octet boundary (/8, /16, /24, /32) have a glob form; list the addresses clients dial")
			}
		case KindIPPort:
			p := javaAddr(e)
			emit(p)
			note(e, []string{p}, "Java cannot restrict a port: the address is exempt on every port")
		case KindHostPort:
			var ps []string
			if strings.HasPrefix(e.Text, ".") || strings.HasPrefix(e.Text, "*.") {
				ps = []string{"*." + e.Host}
			} else {
				ps = []string{e.Host, "*." + e.Host}
			}
			emit(ps...)
			note(e, ps, "Java cannot restrict a port: the host is exempt on every port")
		default:
			note(e, nil, fmt.Sprintf("not translated: %s", e.Problem))
		}
	}
	out.NonProxyHosts = strings.Join(patterns, "|")
	return out
}

func javaAddr(e Entry) string {
	if e.Addr.Is6() && !e.Addr.Is4In6() {
		return "[" + e.Addr.String() + "]"
	}
	return e.Addr.Unmap().String()
}

// javaCIDR is the glob for an IPv4 network on an octet boundary.
func javaCIDR(e Entry) (string, bool) {
	p := e.Prefix
	if !p.IsValid() || !p.Addr().Is4() || p.Bits() == 0 || p.Bits()%8 != 0 {
		return "", false
	}
	b := p.Masked().Addr().As4()
	n := p.Bits() / 8
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(b[i])
	}
	if n == 4 {
		return strings.Join(parts, "."), true
	}
	return strings.Join(parts, ".") + ".*", true
}

// javaMatch is DefaultProxySelector's test of one host against the
// nonProxyHosts value (without the loopback exemption).
func javaMatch(nonProxyHosts, host string) bool {
	host = strings.ToLower(host)
	for _, p := range strings.Split(nonProxyHosts, "|") {
		p = strings.ToLower(p)
		if p == "" {
			continue
		}
		lead, trail := strings.HasPrefix(p, "*"), strings.HasSuffix(p, "*") && len(p) > 1
		core := strings.TrimSuffix(strings.TrimPrefix(p, "*"), "*")
		if p == "*" {
			core = ""
		}
		switch {
		case lead && trail && strings.Contains(host, core),
			lead && !trail && strings.HasSuffix(host, core),
			!lead && trail && strings.HasPrefix(host, core),
			!lead && !trail && host == core:
			return true
		}
	}
	return false
}
