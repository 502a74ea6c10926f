package noproxy

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// The Curl family models curl 7.86–8.8 as shipped in Debian 12 (curl
// 7.88.1; the model is confirmed against the real binary by the tests):
// lib/noproxy.c Curl_check_noproxy, fed with conn->host.name from lib/url.c
// parseurlandfillconn, i.e. the host after lib/urlapi.c normalised it.
//
// Host preparation (urlapi.c/url.c):
//   - numeric IPv4 forms are normalised (ipv4_normalize: "127.1", "0x7f.1",
//     "2130706433", "0177.0.0.1" all become "127.0.0.1");
//   - an IPv6 literal loses its brackets and zone, and is rewritten by
//     inet_ntop only when that is shorter ("[0:0::1]" → "::1", but
//     "[0::2:3]" stays "0::2:3");
//   - percent-escapes are decoded; a non-ASCII host goes through IDN
//     (punycode), which fails outside a UTF-8 locale;
//   - a port above 65535 is an error.
//
// List semantics (noproxy.c):
//   - the value is a C string: it ends at the first NUL byte;
//   - only a value that is exactly "*" disables the proxy; a "*" entry in a
//     longer list is an ordinary (never matching) name;
//   - entries are separated by commas and blanks (space, tab); curl 8.9 and
//     later stop reading the list at the first blank-separated word;
//   - for host names one trailing dot is ignored on both sides and one
//     leading dot on the entry, so ".example.com" also matches
//     "example.com"; "example.com" matches itself and "*.example.com" but
//     not "notexample.com"; comparison is ASCII case-insensitive;
//   - there is no "*." wildcard and no port syntax: "*.corp" and
//     "host:80" never match;
//   - an IPv4 host is compared with inet_pton-strict dotted quads, with an
//     optional "/bits" parsed by atoi (so "/8x" is 8, "/" is 0, and
//     "/4294967304" wraps to 8); bits 0 or 32 mean an exact address match,
//     so "10.0.0.0/0" matches only 10.0.0.0; bits above 32 never match;
//   - an IPv6 host arrives without brackets and is compared as a host name,
//     textually: "::1" matches [::1] and [0:0::1], IPv6 CIDRs never match
//     (curl 8.9+ compares IPv6 addresses and CIDRs numerically);
//   - no built-in exemption: localhost and 127.0.0.1 go through the proxy
//     unless listed.
//
// CIDR entries need curl 7.86 or later; 7.76 (RHEL 9) ignores them.

func curlDecide(noProxy string, u *url.URL) (Verdict, error) {
	name, err := curlHostName(u)
	if err != nil {
		return Verdict{}, err
	}
	if i := strings.IndexByte(noProxy, 0); i >= 0 {
		noProxy = noProxy[:i] // a C string ends here
	}
	if name == "" {
		return proxied("curl has no host name to look up in NO_PROXY"), nil
	}
	if noProxy == "" {
		return proxied("NO_PROXY is empty"), nil
	}
	if noProxy == "*" {
		return direct("*", "curl disables the proxy when the whole value is \"*\""), nil
	}
	if tok, ok := curlMatch(name, noProxy); ok {
		return direct(tok, "curl matched the entry"), nil
	}
	return proxied(whyNoMatch), nil
}

// curlHostName is the host as curl 7.88 hands it to Curl_check_noproxy.
func curlHostName(u *url.URL) (string, error) {
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 64); err != nil || n > 65535 {
			return "", fmt.Errorf("%w: curl rejects port %q", ErrInvalidURL, p)
		}
	}
	host := u.Hostname()
	if strings.HasPrefix(u.Host, "[") {
		if i := strings.IndexByte(host, '%'); i >= 0 {
			host = host[:i]
		}
		if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
			if norm := glibcNtop6(a.As16()); len(norm) < len(host) {
				host = norm
			}
		}
		return host, nil
	}
	if v, ok := curlIPv4Normalize(host); ok {
		return v, nil
	}
	ascii, err := goIDNA(host)
	if err != nil {
		return "", fmt.Errorf("%w: curl cannot convert the host to punycode: %v", ErrInvalidURL, err)
	}
	return ascii, nil
}

// curlMatch is the token loop of Curl_check_noproxy; it returns the
// matching token.
func curlMatch(name, noProxy string) (string, bool) {
	isIPv4 := false
	namelen := len(name)
	if _, ok := inetPton4(name); ok {
		isIPv4 = true
	} else if name[namelen-1] == '.' {
		namelen-- // ignore a trailing dot in the host name
	}
	n := name[:namelen]
	p := 0
	for p < len(noProxy) {
		for p < len(noProxy) && isBlank(noProxy[p]) {
			p++
		}
		start := p
		for p < len(noProxy) && !isBlank(noProxy[p]) && noProxy[p] != ',' {
			p++
		}
		if tok := noProxy[start:p]; tok != "" {
			var ok bool
			if isIPv4 {
				ok = curlMatchIPv4(name, tok)
			} else {
				ok = curlMatchHost(n, tok)
			}
			if ok {
				return tok, true
			}
		}
		for p < len(noProxy) && (isBlank(noProxy[p]) || noProxy[p] == ',') {
			p++ // 7.88 carries on after a blank as after a comma
		}
	}
	return "", false
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func curlMatchHost(name, tok string) bool {
	if tok[len(tok)-1] == '.' {
		tok = tok[:len(tok)-1]
	}
	if tok != "" && tok[0] == '.' {
		tok = tok[1:]
	}
	switch {
	case len(tok) == len(name):
		return asciiEqualFold(tok, name)
	case len(tok) < len(name):
		return name[len(name)-len(tok)-1] == '.' && asciiEqualFold(tok, name[len(name)-len(tok):])
	}
	return false
}

func curlMatchIPv4(name, tok string) bool {
	if len(tok) >= 128 {
		return false // does not fit curl's buffer: "this cannot match"
	}
	check := tok
	var bits uint32
	if i := strings.IndexByte(tok, '/'); i >= 0 {
		bits = uint32(cAtoi(tok[i+1:]))
		check = tok[:i]
	}
	if bits > 32 {
		return false
	}
	addr, ok1 := inetPton4(name)
	network, ok2 := inetPton4(check)
	if !ok1 || !ok2 {
		return false
	}
	if bits != 0 && bits != 32 {
		mask := uint32(0xffffffff) << (32 - bits)
		return (addr^network)&mask == 0
	}
	return addr == network
}

// asciiEqualFold is curl_strnequal: only A-Z fold.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if asciiUpper(a[i]) != asciiUpper(b[i]) {
			return false
		}
	}
	return true
}

func asciiUpper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// cAtoi is glibc atoi: (int)strtol(s, NULL, 10), with strtol saturating at
// the 64-bit limits before the truncation to int.
func cAtoi(s string) int32 {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	var v uint64
	overflow := false
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if v > (1<<63-d)/10 {
			overflow = true
		}
		if !overflow {
			v = v*10 + d
		}
	}
	var l int64
	switch {
	case overflow && neg:
		l = -1 << 63
	case overflow:
		l = 1<<63 - 1
	case neg && v == 1<<63:
		l = -1 << 63
	case v >= 1<<63:
		l = 1<<63 - 1
	case neg:
		l = -int64(v)
	default:
		l = int64(v)
	}
	return int32(l)
}

func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// inetPton4 is glibc inet_pton(AF_INET): exactly four decimal octets, no
// leading zeros, nothing else. The result is in host order.
func inetPton4(s string) (uint32, bool) {
	var out uint32
	octets, cur := 0, -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			if cur == 0 {
				return 0, false // leading zero
			}
			if cur < 0 {
				cur = 0
				octets++
				if octets > 4 {
					return 0, false
				}
			}
			cur = cur*10 + int(c-'0')
			if cur > 255 {
				return 0, false
			}
		case c == '.' && cur >= 0:
			if octets == 4 {
				return 0, false
			}
			out = out<<8 | uint32(cur)
			cur = -1
		default:
			return 0, false
		}
	}
	if octets < 4 || cur < 0 {
		return 0, false
	}
	return out<<8 | uint32(cur), true
}

// curlIPv4Normalize is urlapi.c ipv4_normalize: one to four parts in
// decimal, octal (leading 0) or hex (0x), the last part filling the
// remaining bytes, printed back as a dotted quad.
func curlIPv4Normalize(host string) (string, bool) {
	var parts [4]uint64
	n := 0
	c := host
	for {
		if c == "" || c[0] < '0' || c[0] > '9' {
			return "", false
		}
		v, rest, ok := cStrtoul0(c)
		if !ok || v > 0xffffffff {
			return "", false
		}
		parts[n] = v
		c = rest
		if c == "" {
			break
		}
		if c[0] != '.' || n == 3 {
			return "", false
		}
		n++
		c = c[1:]
	}
	var a uint64
	switch n {
	case 0:
		a = parts[0]
	case 1:
		if parts[0] > 0xff || parts[1] > 0xffffff {
			return "", false
		}
		a = parts[0]<<24 | parts[1]
	case 2:
		if parts[0] > 0xff || parts[1] > 0xff || parts[2] > 0xffff {
			return "", false
		}
		a = parts[0]<<24 | parts[1]<<16 | parts[2]
	case 3:
		for _, p := range parts {
			if p > 0xff {
				return "", false
			}
		}
		a = parts[0]<<24 | parts[1]<<16 | parts[2]<<8 | parts[3]
	}
	return fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&0xff, a>>8&0xff, a&0xff), true
}

// cStrtoul0 is strtoul(s, &end, 0) for s starting with a digit: "0x"
// followed by a hex digit is hex, a leading "0" is octal, else decimal.
// ok is false on overflow of unsigned long.
func cStrtoul0(s string) (v uint64, rest string, ok bool) {
	base, i := uint64(10), 0
	if s[0] == '0' {
		if len(s) > 2 && (s[1] == 'x' || s[1] == 'X') && hexVal(s[2]) < 16 {
			base, i = 16, 2
		} else {
			base = 8
		}
	}
	overflow := false
	for ; i < len(s); i++ {
		d := hexVal(s[i])
		if d >= base {
			break
		}
		if v > (^uint64(0)-d)/base {
			overflow = true
		}
		v = v*base + d
	}
	return v, s[i:], !overflow
}

func hexVal(c byte) uint64 {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0')
	case 'a' <= c && c <= 'f':
		return uint64(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return uint64(c-'A') + 10
	}
	return 99
}

// glibcNtop6 is glibc inet_ntop(AF_INET6): the first longest run of two or
// more zero words becomes "::", hex is lower-case, and an address whose
// first six words are zero (or five zeros then ffff) ends in a dotted quad.
func glibcNtop6(a [16]byte) string {
	var w [8]int
	for i := range w {
		w[i] = int(a[2*i])<<8 | int(a[2*i+1])
	}
	bestBase, bestLen, curBase, curLen := -1, 0, -1, 0
	for i := 0; i < 8; i++ {
		if w[i] == 0 {
			if curBase < 0 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase >= 0 {
			if bestBase < 0 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase >= 0 && (bestBase < 0 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase >= 0 && bestLen < 2 {
		bestBase = -1
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase >= 0 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && w[5] == 0xffff)) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", a[12], a[13], a[14], a[15])
			break
		}
		fmt.Fprintf(&b, "%x", w[i])
	}
	if bestBase >= 0 && bestBase+bestLen == 8 {
		b.WriteByte(':')
	}
	return b.String()
}
