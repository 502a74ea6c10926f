package noproxy

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// The Node family models the npm package proxy-from-env 2.1.0
// getProxyForUrl (axios 1.x and many others use it; Node.js 20 itself
// ignores the variables). The URL is parsed by the WHATWG URL parser
// (new URL), whose host is the one compared; the tests run the real package
// on Node.js.
//
// Host preparation (WHATWG URL):
//   - names are percent-decoded, lower-cased and IDNA-encoded;
//   - a host whose last label is a number is an IPv4 address in any of the
//     inet_aton forms and is printed back as a dotted quad ("127.1",
//     "0x7f.1", "2130706433" → 127.0.0.1); one that is not valid fails;
//   - IPv6 literals keep their brackets and are printed in RFC 5952 form
//     ("[2001:db8:0::1]" → "[2001:db8::1]", "[::ffff:10.0.0.1]" →
//     "[::ffff:a00:1]");
//   - a port equal to the scheme's default is dropped; a port above 65535
//     makes the URL invalid.
//
// List semantics (shouldProxy):
//   - no_proxy (then NO_PROXY) is lower-cased; exactly "*" bypasses
//     everything;
//   - the list is split at every "," and every JavaScript whitespace
//     character; empty entries are skipped;
//   - an entry "host:digits" matches only that port (the URL's, or 80/443
//     from the scheme); a port of 0 counts as no port;
//   - an entry that does not start with "." or "*" must equal the host:
//     "example.com" does NOT match www.example.com;
//   - otherwise one leading "*" is removed and the host must end with the
//     rest: ".example.com" and "*.example.com" match www.example.com but not
//     example.com, "*example.com" also matches notexample.com, and a "*"
//     entry anywhere in the list matches every host;
//   - there are no CIDRs, and IPv6 entries need brackets ("[::1]"); a bare
//     "::1" reads as host ":" with port 1;
//   - no built-in localhost exemption.

func nodeDecide(noProxy string, u *url.URL) (Verdict, error) {
	if hasNUL(noProxy) || !utf8.ValidString(noProxy) {
		return Verdict{}, fmt.Errorf("%w: NUL byte or invalid UTF-8", ErrUnsupportedInput)
	}
	host, err := whatwgHost(u)
	if err != nil {
		return Verdict{}, err
	}
	port, err := nodePort(u)
	if err != nil {
		return Verdict{}, err
	}
	np := nodeLower(noProxy)
	switch {
	case np == "":
		return proxied("NO_PROXY is empty"), nil
	case np == "*":
		return direct(noProxy, "proxy-from-env disables the proxy when the whole value is \"*\""), nil
	}
	for _, e := range strings.FieldsFunc(np, func(r rune) bool { return r == ',' || isJSSpace(r) }) {
		name, ep := nodeSplitEntry(e)
		if ep != 0 && ep != port {
			continue
		}
		if name[0] != '.' && name[0] != '*' {
			if host == name {
				return direct(e, "the host equals the entry"), nil
			}
			continue
		}
		suffix := strings.TrimPrefix(name, "*")
		if strings.HasSuffix(host, suffix) {
			why := "the host ends with the entry"
			if suffix == "" {
				why = "a \"*\" entry matches every host"
			}
			return direct(e, why), nil
		}
	}
	return proxied(whyNoMatch), nil
}

// nodeSplitEntry is the /^(.+):(\d+)$/ match with parseInt of the port;
// a port that cannot equal a URL port is returned as -1.
func nodeSplitEntry(e string) (string, int) {
	i := strings.LastIndexByte(e, ':')
	if i < 1 || i == len(e)-1 || !allDigits(e[i+1:]) {
		return e, 0
	}
	digits := strings.TrimLeft(e[i+1:], "0")
	if digits == "" {
		return e[:i], 0
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > 0xffff {
		return e[:i], -1
	}
	return e[:i], n
}

// nodePort is parseInt(url.port) || DEFAULT_PORTS[proto].
func nodePort(u *url.URL) (int, error) {
	p := u.Port()
	if p == "" {
		return nodeDefaultPort(u.Scheme), nil
	}
	n, err := strconv.Atoi(strings.TrimLeft(p, "0") + "0")
	if err != nil || n/10 > 0xffff {
		return 0, fmt.Errorf("%w: the WHATWG URL parser rejects port %q", ErrInvalidURL, p)
	}
	if n /= 10; n != 0 {
		return n, nil
	}
	return nodeDefaultPort(u.Scheme), nil
}

func nodeDefaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

// whatwgHost is the host serialisation of the WHATWG URL standard for a
// special scheme.
func whatwgHost(u *url.URL) (string, error) {
	host := u.Hostname()
	fail := func(why string) (string, error) {
		return "", fmt.Errorf("%w: the WHATWG URL parser rejects the host: %s", ErrInvalidURL, why)
	}
	if strings.HasPrefix(u.Host, "[") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return fail("not an IPv6 address")
		}
		return "[" + rfc5952(a.As16()) + "]", nil
	}
	raw, err := url.PathUnescape(host)
	if err != nil {
		raw = host
	}
	if !utf8.ValidString(raw) {
		return fail("percent-decoded host is not UTF-8")
	}
	ascii := true
	for i := 0; i < len(raw); i++ {
		if raw[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	var name string
	if ascii && !strings.Contains(strings.ToLower(raw), "xn--") {
		name = strings.ToLower(raw)
	} else {
		name, err = whatwgIDNA.ToASCII(raw)
		if err != nil {
			return fail(err.Error())
		}
	}
	if name == "" {
		return fail("empty host")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= 0x20 || c == 0x7f || strings.IndexByte("#%/:<>?@[\\]^|", c) >= 0 {
			return fail(fmt.Sprintf("forbidden character %q", c))
		}
	}
	if whatwgEndsInNumber(name) {
		a, ok := whatwgIPv4(name)
		if !ok {
			return fail("not a valid IPv4 address")
		}
		return fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&0xff, a>>8&0xff, a&0xff), nil
	}
	return name, nil
}

// whatwgIDNA approximates UTS 46 processing as the URL standard sets it:
// non-transitional, no STD3 rules, no hyphen or length checks.
var whatwgIDNA = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(false), idna.BidiRule(), idna.CheckJoiners(true))

func whatwgEndsInNumber(host string) bool {
	parts := strings.Split(host, ".")
	if parts[len(parts)-1] == "" {
		if len(parts) == 1 {
			return false
		}
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	if len(last) >= 2 && (last[:2] == "0x" || last[:2] == "0X") {
		for i := 2; i < len(last); i++ {
			if hexVal(last[i]) >= 16 {
				return false
			}
		}
		return true
	}
	return false
}

// whatwgIPv4 is the URL standard's IPv4 parser.
func whatwgIPv4(host string) (uint32, bool) {
	parts := strings.Split(host, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return 0, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "" {
			return 0, false
		}
		base := uint64(10)
		switch {
		case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, p = 16, p[2:]
		case len(p) >= 2 && p[0] == '0':
			base, p = 8, p[1:]
		}
		var v uint64
		for j := 0; j < len(p); j++ {
			d := hexVal(p[j])
			if d >= base {
				return 0, false
			}
			if v < 1<<40 {
				v = v*base + d
			}
		}
		nums[i] = v
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return 0, false
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return 0, false
	}
	ipv4 := last
	for i, n := range nums[:len(nums)-1] {
		ipv4 += n << (8 * (3 - i))
	}
	return uint32(ipv4), true
}

// rfc5952 is the URL standard's IPv6 serializer: the first longest run of
// two or more zero pieces becomes "::", lower-case hex, no dotted quad.
func rfc5952(a [16]byte) string {
	var w [8]int
	for i := range w {
		w[i] = int(a[2*i])<<8 | int(a[2*i+1])
	}
	best, bestLen := -1, 1
	for i := 0; i < 8; {
		j := i
		for j < 8 && w[j] == 0 {
			j++
		}
		if j-i > bestLen {
			best, bestLen = i, j-i
		}
		if j == i {
			j++
		}
		i = j
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if i == best {
			b.WriteString("::")
			i += bestLen - 1
			continue
		}
		if i > 0 && i != best+bestLen {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%x", w[i])
	}
	return b.String()
}

// nodeLower approximates String.prototype.toLowerCase.
func nodeLower(s string) string { return strings.ToLower(s) }

// isJSSpace is the \s class of JavaScript regular expressions.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return 0x2000 <= r && r <= 0x200a || (r != 0x85 && unicode.Is(unicode.Zs, r))
}
