package noproxy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The Python family models requests 2.34 utils.should_bypass_proxies(url,
// no_proxy) on CPython 3.11 (the tests run the real function when it is
// installed). It is the OR of two independent checks:
//
// requests' own loop:
//   - the URL is split by urllib.parse.urlsplit: hostname is lower-cased,
//     without brackets; a port that is not ASCII digits or is above 65535
//     raises ValueError (only evaluated for non-IPv4 hosts);
//   - every " " is deleted from the list (so "exa mple.com" reads
//     "example.com"), which is split at ",";
//   - an IPv4 host (anything glibc inet_aton accepts: "10.1", "0x7f.1",
//     "127.0.0.1 trailing") matches an entry that is a valid IPv4 CIDR (one
//     "/", a mask that Python's int() reads as 1..32 — so "/ 8", "/+8" and
//     "/0_8" work and "/0" does not — and an inet_aton network) or that
//     equals the host text; ports in entries never match;
//   - any other host (names, IPv6) matches an entry, leading dots removed,
//     that equals the host or the host with its explicit port
//     ("example.com:8080" needs ":8080" in the URL, default ports do not
//     count), or that is a dot-suffix of either; this comparison is
//     case-sensitive and entries are not trimmed of tabs.
//
// urllib.request.proxy_bypass_environment (requests' fallback, which
// receives the lower-cased hostname without port):
//   - a list that is exactly "*" bypasses everything (" *" or "*,x" do
//     not; neither anywhere does a "*" entry);
//   - entries are split at ",", stripped of whitespace and leading dots,
//     lower-cased, and match the host or a dot-suffix of it — also for
//     IPv4 hosts, so "0.0.1" matches 10.0.0.1;
//   - the host is first split at its last ":" followed only by digits, so
//     for [fe80::1] the entry "fe80:" matches.
//
// Neither check exempts localhost or loopback. A URL with no host name
// bypasses the proxy. Non-ASCII hosts are compared as written: real
// requests IDNA-encodes the host while preparing the request, so pass the
// punycode form to model that.

func pythonDecide(noProxy, rawURL string) (Verdict, error) {
	if hasNUL(noProxy, rawURL) || !utf8.ValidString(noProxy) || !utf8.ValidString(rawURL) {
		return Verdict{}, fmt.Errorf("%w: NUL byte or invalid UTF-8", ErrUnsupportedInput)
	}
	hostname, portText, err := pyHostPort(rawURL)
	if err != nil {
		return Verdict{}, err
	}
	if hostname == "" {
		return direct("", "requests bypasses proxies for URLs without a host name"), nil
	}
	if noProxy != "" {
		v, ok, err := pyRequestsLoop(noProxy, hostname, portText)
		if err != nil || ok {
			return v, err
		}
		if noProxy == "*" {
			return direct("*", "urllib disables the proxy when the whole value is \"*\""), nil
		}
		if name, ok := pyUrllibBypass(noProxy, hostname); ok {
			return direct(name, "urllib's proxy_bypass_environment matched the entry as a domain suffix"), nil
		}
	}
	return proxied(whyNoMatch), nil
}

func pyRequestsLoop(noProxy, hostname, portText string) (Verdict, bool, error) {
	var hosts []string
	for _, h := range strings.Split(strings.ReplaceAll(noProxy, " ", ""), ",") {
		if h != "" {
			hosts = append(hosts, h)
		}
	}
	if _, ok := inetAton(hostname); ok {
		for _, h := range hosts {
			if pyIsValidCIDR(h) {
				if pyAddressInNetwork(hostname, h) {
					return direct(h, "the IPv4 address is inside the CIDR"), true, nil
				}
			} else if hostname == h {
				return direct(h, "the IPv4 host equals the entry"), true, nil
			}
		}
		return Verdict{}, false, nil
	}
	port, err := pyPort(portText)
	if err != nil {
		return Verdict{}, false, err
	}
	hostWithPort := hostname
	if port != 0 {
		hostWithPort += ":" + strconv.Itoa(port)
	}
	for _, h := range hosts {
		h = strings.TrimLeft(h, ".")
		if hostname == h || hostWithPort == h {
			return direct(h, "the host equals the entry"), true, nil
		}
		if strings.HasSuffix(hostname, "."+h) || strings.HasSuffix(hostWithPort, "."+h) {
			return direct(h, "the host is a subdomain of the entry"), true, nil
		}
	}
	return Verdict{}, false, nil
}

// pyUrllibBypass is proxy_bypass_environment for a non-empty list that is
// not exactly "*".
func pyUrllibBypass(noProxy, hostname string) (string, bool) {
	host := pyLower(hostname)
	hostonly := pySplitPort(host)
	for _, name := range strings.Split(noProxy, ",") {
		name = strings.TrimFunc(name, pyIsSpace)
		if name == "" {
			continue
		}
		name = pyLower(strings.TrimLeft(name, "."))
		if hostonly == name || host == name {
			return name, true
		}
		if strings.HasSuffix(hostonly, "."+name) || strings.HasSuffix(host, "."+name) {
			return name, true
		}
	}
	return "", false
}

// pyStripTabsNewlines removes what urlsplit strips anywhere in a URL
// (bpo-43882). Built once: a Replacer per call was 8% of a replay's CPU
// (B6), and a Replacer is safe for concurrent use.
var pyStripTabsNewlines = strings.NewReplacer("\t", "", "\r", "", "\n", "")

// pyHostPort returns urlsplit(url).hostname ("" for None) and the raw port
// text ("" for None), raising ErrInvalidURL where urlsplit raises.
func pyHostPort(raw string) (hostname, port string, err error) {
	url := strings.TrimLeft(raw, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")
	url = pyStripTabsNewlines.Replace(url)
	if i := strings.IndexByte(url, ':'); i > 0 && isASCIIAlpha(url[0]) && isSchemeChars(url[:i]) {
		url = url[i+1:]
	}
	if !strings.HasPrefix(url, "//") {
		return "", "", nil
	}
	netloc := url[2:]
	if i := strings.IndexAny(netloc, "/?#"); i >= 0 {
		netloc = netloc[:i]
	}
	open, closed := strings.Contains(netloc, "["), strings.Contains(netloc, "]")
	if open != closed {
		return "", "", fmt.Errorf("%w: Python's urlsplit raises ValueError (Invalid IPv6 URL)", ErrInvalidURL)
	}
	if open {
		_, after, _ := strings.Cut(netloc, "[")
		bracketed, _, _ := strings.Cut(after, "]")
		if !pyValidBracketedHost(bracketed) {
			return "", "", fmt.Errorf("%w: Python's urlsplit raises ValueError for the bracketed host", ErrInvalidURL)
		}
	}
	hostinfo := netloc
	if i := strings.LastIndexByte(hostinfo, '@'); i >= 0 {
		hostinfo = hostinfo[i+1:]
	}
	if _, bracketed, ok := strings.Cut(hostinfo, "["); ok {
		var rest string
		hostname, rest, _ = strings.Cut(bracketed, "]")
		_, port, _ = strings.Cut(rest, ":")
	} else {
		hostname, port, _ = strings.Cut(hostinfo, ":")
	}
	if hostname != "" {
		h, zone, hasZone := strings.Cut(hostname, "%")
		hostname = pyLower(h)
		if hasZone {
			hostname += "%" + zone
		}
	}
	return hostname, port, nil
}

// pyValidBracketedHost is urllib.parse._check_bracketed_host: an IPvFuture
// "v1.x" or an IPv6 address (ipaddress.ip_address, scope id allowed).
func pyValidBracketedHost(h string) bool {
	if strings.HasPrefix(h, "v") {
		dot := strings.IndexByte(h, '.')
		if dot < 2 || dot == len(h)-1 {
			return false
		}
		for i := 1; i < dot; i++ {
			if hexVal(h[i]) >= 16 {
				return false
			}
		}
		return !strings.ContainsRune(h[dot+1:], '\n')
	}
	addr, scope, hasScope := strings.Cut(h, "%")
	if hasScope && (scope == "" || strings.Contains(scope, "%")) {
		return false
	}
	a, err := netip.ParseAddr(addr)
	return err == nil && a.Is6() && a.Zone() == ""
}

// pyPort is the SplitResult.port property for the raw port text.
func pyPort(text string) (int, error) {
	if text == "" {
		return 0, nil
	}
	for i := 0; i < len(text); i++ {
		if text[i] < '0' || text[i] > '9' {
			return 0, fmt.Errorf("%w: Python raises ValueError: port %q is not an integer", ErrInvalidURL, text)
		}
	}
	n, err := strconv.ParseUint(text, 10, 64)
	if err != nil || n > 65535 {
		return 0, fmt.Errorf("%w: Python raises ValueError: port out of range 0-65535", ErrInvalidURL)
	}
	return int(n), nil
}

// pySplitPort is urllib.parse._splitport's host part: the regex
// "(.*):([0-9]*)" must match the whole string; the group replaces the host
// even when the port group is empty.
func pySplitPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 {
		return host
	}
	for j := i + 1; j < len(host); j++ {
		if host[j] < '0' || host[j] > '9' {
			return host
		}
	}
	return host[:i]
}

func pyIsValidCIDR(s string) bool {
	if strings.Count(s, "/") != 1 {
		return false
	}
	netaddr, bits, _ := strings.Cut(s, "/")
	mask, ok := pyInt(bits)
	if !ok || mask < 1 || mask > 32 {
		return false
	}
	_, ok = inetAton(netaddr)
	return ok
}

// pyAddressInNetwork is requests.utils.address_in_network; both arguments
// have already passed inet_aton / is_valid_cidr.
func pyAddressInNetwork(ip, network string) bool {
	netaddr, bits, _ := strings.Cut(network, "/")
	mask, _ := pyInt(bits)
	netmask := uint32(0xffffffff) ^ (uint32(1)<<(32-mask) - 1)
	a, _ := inetAton(ip)
	n, _ := inetAton(netaddr)
	return a&netmask == n&netmask
}

// inetAton is glibc inet_aton as used by Python's socket.inet_aton: one to
// four parts in C notation (decimal, 0-octal, 0x-hex), the last filling the
// remaining bytes, and anything after ASCII whitespace ignored.
func inetAton(s string) (uint32, bool) {
	var parts []uint64
	var val uint64
	c := s
	for {
		if c == "" || c[0] < '0' || c[0] > '9' {
			return 0, false
		}
		v, rest, ok := cStrtoul0(c)
		if !ok || v > 0xffffffff {
			return 0, false
		}
		c = rest
		if c != "" && c[0] == '.' {
			if len(parts) > 2 || v > 0xff {
				return 0, false
			}
			parts = append(parts, v)
			c = c[1:]
			continue
		}
		val = v
		break
	}
	if c != "" && !isCSpace(c[0]) {
		return 0, false
	}
	limits := [4]uint64{0xffffffff, 0xffffff, 0xffff, 0xff}
	if val > limits[len(parts)] {
		return 0, false
	}
	var out uint64
	for i, p := range parts {
		out |= p << (24 - 8*i)
	}
	return uint32(out | val), true
}

// pyInt is Python's int(str) in base 10, reporting only whether it parsed
// and a value clamped to the int range: surrounding (Unicode) whitespace,
// a sign, single underscores between digits and any Unicode decimal digit
// are accepted; more than 4300 digits raise ValueError.
func pyInt(s string) (int, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	val, digits, prevUnderscore := 0, 0, true
	for _, r := range s {
		if r == '_' {
			if prevUnderscore {
				return 0, false
			}
			prevUnderscore = true
			continue
		}
		d, ok := pyDigit(r)
		if !ok {
			return 0, false
		}
		prevUnderscore = false
		digits++
		if val < 1<<20 {
			val = val*10 + d
		}
	}
	if prevUnderscore || digits > 4300 {
		return 0, false
	}
	if neg {
		val = -val
	}
	return val, true
}

// pyDigit returns the value of a Unicode decimal digit (category Nd). Nd
// digits come in aligned runs of ten starting at zero.
func pyDigit(r rune) (int, bool) {
	if '0' <= r && r <= '9' {
		return int(r - '0'), true
	}
	if !unicode.Is(unicode.Nd, r) {
		return 0, false
	}
	for _, rg := range unicode.Nd.R16 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10, true
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10, true
		}
	}
	return 0, false
}

// pyIsSpace is Py_UNICODE_ISSPACE, which adds the ASCII separators
// U+001C..U+001F to Unicode White_Space.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (0x1c <= r && r <= 0x1f) }

// pyLower approximates str.lower(); it is exact for ASCII.
func pyLower(s string) string { return strings.ToLower(s) }

func isASCIIAlpha(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

func isSchemeChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isASCIIAlpha(c) && !('0' <= c && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}
