package noproxy

import (
	"net"
	"net/netip"
	"strings"
)

// Kind classifies a list entry the way Go's httpproxy reads it; the other
// clients' readings are described on the Kind values and checked by Lint.
type Kind int

// Entry kinds. KindInvalid entries are skipped or can never match in Go.
const (
	KindInvalid    Kind = iota
	KindWildcard        // "*": Go disables the proxy for every host
	KindCIDR            // "10.0.0.0/8", "fd00::/8"
	KindIP              // "10.0.0.1", "::1"
	KindIPPort          // "10.0.0.1:8080", "[::1]:8080" (Go only honours the port)
	KindDomain          // "corp.example": the name and its subdomains
	KindDotDomain       // ".corp.example": subdomains only in Go, the name too in curl/Python
	KindStarDomain      // "*.corp.example": Go reads ".corp.example", curl/Python never match
	KindHostPort        // "corp.example:443" (also with a leading "." or "*.")
)

func (k Kind) String() string {
	switch k {
	case KindWildcard:
		return "wildcard"
	case KindCIDR:
		return "cidr"
	case KindIP:
		return "ip"
	case KindIPPort:
		return "ip:port"
	case KindDomain:
		return "domain"
	case KindDotDomain:
		return ".domain"
	case KindStarDomain:
		return "*.domain"
	case KindHostPort:
		return "host:port"
	}
	return "invalid"
}

// Entry is one element of a parsed list.
type Entry struct {
	// Text is the entry as written, surrounding whitespace trimmed.
	Text string
	Kind Kind
	// Host is the lower-cased host part without brackets, port, leading
	// "." or "*." (empty for wildcards and CIDRs).
	Host string
	// Port is the port of KindIPPort and KindHostPort entries.
	Port string
	// Prefix is set for KindCIDR, Addr for KindIP and KindIPPort.
	Prefix netip.Prefix
	Addr   netip.Addr
	// Problem says why a KindInvalid entry cannot work.
	Problem string
}

// Parse splits a noProxy list at commas, trims whitespace around entries,
// drops empty ones and classifies the rest, keeping their order.
// Duplicates are kept: Lint reports them.
func Parse(noProxy string) []Entry {
	var out []Entry
	for _, raw := range strings.Split(noProxy, ",") {
		if t := strings.TrimSpace(raw); t != "" {
			out = append(out, classify(t))
		}
	}
	return out
}

// classify follows the order of httpproxy's config.init so that the kind
// is the one Go acts on.
func classify(text string) Entry {
	e := Entry{Text: text}
	p := strings.ToLower(text)
	invalid := func(why string) Entry {
		e.Kind, e.Problem = KindInvalid, why
		return e
	}
	if p == "*" {
		e.Kind = KindWildcard
		return e
	}
	if _, _, err := net.ParseCIDR(p); err == nil {
		e.Kind = KindCIDR
		if pfx, err := netip.ParsePrefix(p); err == nil {
			e.Prefix = pfx
		}
		return e
	}
	switch {
	case strings.Contains(p, "://"):
		return invalid("it is a URL; list the host name only")
	case strings.ContainsAny(p, " \t\r\n\v\f"):
		return invalid("it contains whitespace")
	case strings.Contains(p, "/"):
		return invalid("it is not a valid CIDR")
	}
	if host, port, err := net.SplitHostPort(p); err == nil {
		if host == "" {
			return invalid("it has a port but no host")
		}
		if port != "" && !allDigits(port) {
			return invalid("its port is not a number")
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		e.Port = port
		if a, err := netip.ParseAddr(host); err == nil && net.ParseIP(host) != nil {
			e.Kind, e.Addr, e.Host = KindIPPort, a, host
			return e
		}
		e.Kind = KindHostPort
		e.Host = strings.TrimPrefix(strings.TrimPrefix(host, "*."), ".")
		if strings.Contains(e.Host, "*") || e.Host == "" {
			return invalid("only a whole \"*\" or a leading \"*.\" acts as a wildcard")
		}
		return e
	}
	if net.ParseIP(p) != nil {
		e.Kind, e.Host = KindIP, p
		e.Addr, _ = netip.ParseAddr(p)
		return e
	}
	switch {
	case strings.HasPrefix(p, "["):
		return invalid("brackets are only understood together with a port")
	case strings.HasPrefix(p, "*."):
		e.Kind, e.Host = KindStarDomain, p[2:]
	case strings.HasPrefix(p, "."):
		e.Kind, e.Host = KindDotDomain, p[1:]
	default:
		e.Kind, e.Host = KindDomain, p
	}
	if strings.Contains(e.Host, "*") || e.Host == "" {
		return invalid("only a whole \"*\" or a leading \"*.\" acts as a wildcard")
	}
	if strings.Contains(e.Host, "%") && strings.Contains(e.Host, ":") {
		return invalid("an IPv6 zone never matches")
	}
	return e
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
