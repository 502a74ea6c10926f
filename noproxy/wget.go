package noproxy

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// The Wget family models GNU Wget 1.21 (verified against wget 1.21.3):
// retr.c getproxy → no_proxy_match → host.c sufmatch, with the list read by
// init.c sepstring from the environment.
//
//   - only the lower-case variable no_proxy is read (NO_PROXY is ignored);
//     an empty value means no list;
//   - the value is split at ","; blanks right after a comma are skipped,
//     but not blanks before one or at the very start, so "a ,b" holds the
//     entry "a " which never matches;
//   - there are no wildcards, no CIDRs and no ports: "*", "10.0.0.0/8" and
//     "example.com:8080" are names that never match;
//   - an entry matches the host (without port, IPv6 without brackets)
//     ASCII case-insensitively when it equals the host, when the host ends
//     in "." + entry, or when the entry starts with "." and is a suffix of
//     the host: ".example.com" matches www.example.com but not example.com;
//   - IP addresses are compared as text, so "0.0.1" matches 10.0.0.1 and
//     "127.1" is not 127.0.0.1;
//   - an empty entry ("a,,b" or a trailing ",") matches every host that
//     ends with a dot;
//   - no built-in localhost exemption.
//
// wget rejects ports above 65535 when parsing the URL.
// Non-ASCII hosts are compared in punycode, as wget's IDN support does.

func wgetDecide(noProxy string, u *url.URL) (Verdict, error) {
	host, err := wgetHost(u)
	if err != nil {
		return Verdict{}, err
	}
	if i := strings.IndexByte(noProxy, 0); i >= 0 {
		noProxy = noProxy[:i] // a C string ends here
	}
	if noProxy == "" {
		return proxied("no_proxy is empty"), nil
	}
	for _, e := range wgetSepstring(noProxy) {
		if wgetSufmatch(e, host) {
			return direct(e, "wget matched the entry as the host or a domain suffix of it"), nil
		}
	}
	return proxied(whyNoMatch), nil
}

func wgetHost(u *url.URL) (string, error) {
	if p := u.Port(); p != "" {
		n := 0
		for i := 0; i < len(p); i++ {
			n = n*10 + int(p[i]-'0')
			if n > 0xffff {
				break
			}
		}
		if n > 0xffff {
			return "", fmt.Errorf("%w: wget rejects port %q", ErrInvalidURL, p)
		}
	}
	host := u.Hostname()
	if strings.HasPrefix(u.Host, "[") {
		if a, err := netip.ParseAddr(host); err != nil || a.Zone() != "" {
			return "", fmt.Errorf("%w: wget rejects the IPv6 address", ErrInvalidURL)
		}
		return host, nil
	}
	ascii, err := goIDNA(host)
	if err != nil {
		return "", fmt.Errorf("%w: wget cannot convert the host to punycode: %v", ErrInvalidURL, err)
	}
	return ascii, nil
}

// wgetSepstring is init.c sepstring.
func wgetSepstring(s string) []string {
	var out []string
	p := 0
	for i := 0; i < len(s); i++ {
		if s[i] != ',' {
			continue
		}
		out = append(out, s[p:i])
		j := i + 1
		for j < len(s) && isCSpace(s[j]) {
			j++
		}
		p = j
		i = j - 1
	}
	return append(out, s[p:])
}

// wgetSufmatch is host.c sufmatch for one list element.
func wgetSufmatch(entry, what string) bool {
	j, k := len(entry), len(what)
	if k < j {
		return false
	}
	// Compare backwards, the terminating NULs first.
	for j >= 0 && k >= 0 {
		var a, b byte
		if j < len(entry) {
			a = entry[j]
		}
		if k < len(what) {
			b = what[k]
		}
		if asciiLower(a) != asciiLower(b) {
			break
		}
		j--
		k--
	}
	return j == -1 && (k == -1 || what[k] == '.' || (entry != "" && entry[0] == '.'))
}

func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
