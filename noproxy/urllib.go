package noproxy

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The Urllib family models CPython 3.11's standard library without
// requests: urllib.request's ProxyHandler, which urlopen installs by
// default and which Ansible's get_url/uri modules (module_utils/urls.py)
// and many scripts rely on. The tests run the real ProxyHandler.
//
// ProxyHandler.proxy_open bypasses the proxy when req.host is non-empty and
// proxy_bypass_environment(req.host) is true. req.host is not a host name:
//   - it is the whole netloc of the URL (after unwrap and after cutting the
//     fragment at the last "#"), percent-decoded, with the port and any
//     userinfo: "http://u:p@example.com/" gives "u:p@example.com", which no
//     name entry matches;
//   - proxy_bypass_environment lower-cases it and splits a ":digits" port
//     off the end ("[::1]:8080" → "[::1]"), then for each entry (split at
//     ",", whitespace-stripped, leading dots removed, lower-cased) tests
//     equality or a "."-suffix against both the host with and without the
//     port: "example.com" matches example.com and www.example.com,
//     ".example.com" the same; "example.com:8080" needs ":8080" spelled in
//     the URL;
//   - a list that is exactly "*" bypasses everything; a "*" entry never
//     matches; there are no CIDRs: "10.0.0.0/8" is a name that never
//     matches, while "0.1" matches 10.0.0.1 as a suffix;
//   - IPv6 hosts keep their brackets: "[::1]" matches, "::1" does not;
//   - an empty no_proxy is treated as unset (os.environ values that are
//     empty are ignored), and there is no built-in localhost exemption.

func urllibDecide(noProxy, rawURL string) (Verdict, error) {
	if hasNUL(noProxy, rawURL) || !utf8.ValidString(noProxy) || !utf8.ValidString(rawURL) {
		return Verdict{}, fmt.Errorf("%w: NUL byte or invalid UTF-8", ErrUnsupportedInput)
	}
	host := urllibRequestHost(rawURL)
	switch {
	case host == "":
		return proxied("urllib has no host to look up in no_proxy"), nil
	case noProxy == "":
		return proxied("NO_PROXY is empty"), nil
	case noProxy == "*":
		return direct("*", "urllib disables the proxy when the whole value is \"*\""), nil
	}
	if name, ok := pyUrllibBypass(noProxy, host); ok {
		why := "urllib matched the entry as the host or a domain suffix of it"
		return direct(name, why), nil
	}
	if strings.Contains(host, "@") {
		return proxied("no entry matches (urllib compares the whole netloc, userinfo included)"), nil
	}
	return proxied(whyNoMatch), nil
}

// urllibRequestHost is urllib.request.Request(url).host: unwrap, cut the
// fragment at the last "#", _splittype, _splithost, unquote.
func urllibRequestHost(raw string) string {
	u := strings.TrimFunc(raw, pyIsSpace)
	if strings.HasPrefix(u, "<") && strings.HasSuffix(u, ">") && len(u) >= 2 {
		u = strings.TrimFunc(u[1:len(u)-1], pyIsSpace)
	}
	if strings.HasPrefix(u, "URL:") {
		u = strings.TrimFunc(u[4:], pyIsSpace)
	}
	if i := strings.LastIndexByte(u, '#'); i >= 0 {
		u = u[:i]
	}
	// _splittype: "([^/:]+):(.*)"
	i := strings.IndexAny(u, "/:")
	if i <= 0 || u[i] != ':' {
		return ""
	}
	rest := u[i+1:]
	// _splithost: "//([^/#?]*)(.*)"
	if !strings.HasPrefix(rest, "//") {
		return ""
	}
	host := rest[2:]
	if j := strings.IndexAny(host, "/#?"); j >= 0 {
		host = host[:j]
	}
	return pyUnquote(host)
}

// pyUnquote is urllib.parse.unquote with UTF-8 and errors="replace":
// valid %XX escapes are decoded, invalid ones kept, and byte sequences that
// are not UTF-8 become U+FFFD per undecodable byte.
func pyUnquote(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && hexVal(s[i+1]) < 16 && hexVal(s[i+2]) < 16 {
			b = append(b, byte(hexVal(s[i+1])<<4|hexVal(s[i+2])))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	var out strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			out.WriteRune(utf8.RuneError)
		} else {
			out.Write(b[:n])
		}
		b = b[n:]
	}
	return out.String()
}
