// Package redact hides credentials in URLs (proxies, NATS servers) before
// they reach chat, logs or events: the one redactor of hcpbot.
//
// Proxy settings travel through many hands (HostedCluster specs, env dumps,
// kube-apiserver-proxy logs) and corporate proxies often carry basic-auth
// credentials in the URL. Its functions err on the side of hiding too much:
// a mangled host name in a chat message is a nuisance, a leaked password is
// an incident. They never fail and never return the input's password.
package redact

import "strings"

// Mask replaces the whole userinfo; the user name is hidden too because
// corporate proxy accounts are often personal and guessable.
const Mask = "***"

// RedactURL returns s with the userinfo of the URL replaced by Mask, e.g.
// "http://user:pass@proxy:3128" → "http://***@proxy:3128". It works on
// strings net/url rejects and on the scheme-less "user:pass@host:port" form
// that Go's httpproxy, curl and Python accept for proxy variables.
func RedactURL(s string) string {
	start := 0
	// Only a valid scheme starts the authority: "u:p@://" is a user
	// name and password before a host that merely holds "://".
	if i := strings.Index(s, "://"); i >= 0 && hasScheme(s) {
		start = i + 3
	} else if strings.HasPrefix(s, "//") {
		start = 2
	}
	end := redactEnd(s, start, len(s))
	if end < 0 {
		return s
	}
	return s[:start] + Mask + s[end:]
}

// URLs redacts a list of server URLs whose entries may themselves be
// comma-separated lists, as NATS clients accept them
// ("nats://a:4222,nats://u:p@b:4222"); every part comes out redacted, in
// order. A raw user name or password may contain a comma, so a part that has
// an '@' but no valid scheme (RFC 3986: a letter, then letters, digits, '+',
// '-' or '.') is taken as the rest of the URL before it and redacted with it
// ("nats://u:pa,ss@h" → "nats://***@h"): hiding a neighbouring host is the
// lesser evil. A server URL has no path, so everything before a part's last
// '@' is userinfo. A password holding a comma followed by "scheme://" cannot
// be told from two URLs.
func URLs(list []string) []string {
	out := make([]string, 0, len(list))
	for _, s := range list {
		var cur []string // the entry's URLs so far
		for p := range strings.SplitSeq(s, ",") {
			p = strings.TrimSpace(p)
			if len(cur) > 0 && !hasScheme(p) && strings.Contains(p, "@") {
				// The rest of an earlier URL's userinfo: back to the
				// nearest part with a scheme (or the entry's start).
				back := len(cur) - 1
				for back > 0 && !hasScheme(cur[back]) {
					back--
				}
				cur = append(cur[:back], strings.Join(cur[back:], ",")+","+p)
				continue
			}
			cur = append(cur, p)
		}
		for _, p := range cur {
			out = append(out, redactServer(p))
		}
	}
	return out
}

// hasScheme reports whether p starts with a valid "scheme://".
func hasScheme(p string) bool {
	i := strings.Index(p, "://")
	if i <= 0 {
		return false
	}
	for k := range i {
		switch c := p[k]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case k > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// redactServer masks everything between a server URL's "://" after a valid
// scheme (or its start) and its last '@': in "u:p://w@h" the "://" is the
// password's, as in RedactURL.
func redactServer(p string) string {
	at := strings.LastIndexByte(p, '@')
	if at < 0 {
		return p
	}
	start := 0
	if i := strings.Index(p, "://"); i >= 0 && i < at && hasScheme(p) {
		start = i + 3
	} else if strings.HasPrefix(p, "//") {
		start = 2
	}
	return p[:start] + Mask + p[at:]
}

// RedactText redacts every URL userinfo found in free text: log lines,
// noProxy values, environment dumps ("HTTPS_PROXY=http://u:p@h:3128"), and
// the scheme-less "user:pass@host" form. A URL is taken to end at
// whitespace; e-mail addresses (no ':' before the '@') are left alone, but
// any other word with a ':' before an '@' is treated as userinfo.
func RedactText(s string) string {
	var b strings.Builder
	i := 0 // s[:i] has been written
	for i < len(s) {
		j := strings.Index(s[i:], "://")
		k := schemelessAt(s, i)
		switch {
		case j < 0 && k < 0:
			b.WriteString(s[i:])
			return b.String()
		case j >= 0 && (k < 0 || i+j < k):
			start := i + j + 3
			end := wordEnd(s, start)
			// A ':' in the word before "://" makes it "user:pass@host"
			// whose password holds "://" ("u:a://b@h", "0:1://#@0"):
			// hidden from the word's start to its last '@', as RedactURL
			// does; what follows "://" alone need not look like userinfo.
			if tok := tokenStart(s, i, i+j); strings.ContainsRune(s[tok:i+j], ':') {
				if last := strings.LastIndexByte(s[start:end], '@'); last >= 0 {
					b.WriteString(s[i:tok])
					b.WriteString(Mask + "@")
					i = start + last + 1
					continue
				}
			}
			at := redactEnd(s, start, end)
			b.WriteString(s[i:start])
			i = start
			if at >= 0 {
				b.WriteString(Mask + "@")
				i = at + 1
			}
		default:
			b.WriteString(s[i:tokenStart(s, i, k)])
			b.WriteString(Mask + "@")
			// The last '@' of the word ends the userinfo: a password may
			// hold '@' (and "://" after it: "u:a@://b@h").
			i = k + strings.LastIndexByte(s[k:tokenEnd(s, k)], '@') + 1
		}
	}
	return b.String()
}

// redactEnd returns the index of the '@' that ends the userinfo of the URL
// whose authority starts at s[start:], looking no further than stop, or -1
// when there is no userinfo. The authority normally ends at '/', '?' or '#',
// but a raw (unescaped) password may contain those characters; when the
// text up to a later '@' contains a ':' it is treated as userinfo too,
// hiding part of a path in the rare legitimate case rather than leaking.
func redactEnd(s string, start, stop int) int {
	seg := s[start:stop]
	auth := seg
	if i := strings.IndexAny(seg, "/?#"); i >= 0 {
		auth = seg[:i]
	}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		// The last '@' of the whole word wins: an unescaped '@' in the
		// password followed by '/' must not leave the rest visible.
		if last := strings.LastIndexByte(seg, '@'); last > at && strings.ContainsRune(seg[:last], ':') {
			return start + last
		}
		return start + at
	}
	if last := strings.LastIndexByte(seg, '@'); last >= 0 && strings.ContainsRune(seg[:last], ':') {
		return start + last
	}
	return -1
}

// wordEnd returns the index of the first whitespace at or after i.
func wordEnd(s string, i int) int {
	if j := strings.IndexAny(s[i:], " \t\r\n\v\f"); j >= 0 {
		return i + j
	}
	return len(s)
}

// schemelessAt returns the index of the '@' of the first "user:pass@host"
// word at or after i that is not part of a "scheme://" URL, or -1.
func schemelessAt(s string, i int) int {
	for i < len(s) {
		j := strings.IndexByte(s[i:], '@')
		if j < 0 {
			return -1
		}
		at := i + j
		tok := tokenStart(s, 0, at)
		word := s[tok:at]
		if strings.ContainsRune(word, ':') && !strings.Contains(word, "://") {
			return at
		}
		i = at + 1
	}
	return -1
}

// tokenEnd is the index of the first character at or after i that ends a
// word for tokenStart, or len(s).
func tokenEnd(s string, i int) int {
	if j := strings.IndexAny(s[i:], " \t\r\n\v\f\"'`=<>()"); j >= 0 {
		return i + j
	}
	return len(s)
}

// tokenStart walks back from at to the start of its word, but not before
// min. Commas do not end a word: a raw password may contain them, and hiding
// a neighbouring list item is the lesser evil.
func tokenStart(s string, min, at int) int {
	for at > min {
		switch s[at-1] {
		case ' ', '\t', '\r', '\n', '\v', '\f', '"', '\'', '`', '=', '<', '>', '(', ')':
			return at
		}
		at--
	}
	return min
}
