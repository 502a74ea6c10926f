package event

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// redactedUserinfo replaces credentials. It keeps the fact that the proxy
// uses authentication visible, which matters when diagnosing 407 responses,
// and matches the mask of package redact so chat shows one form. The
// contract keeps its own copy to stay free of product dependencies.
const redactedUserinfo = "***"

// maxText bounds every free-text payload field (messages, excerpts, errors):
// Kubernetes caps termination messages at 4 KiB too, and a bounded payload
// keeps events far below MaxSize whatever the cluster reports.
const maxText = 4096

// truncationMark shows a reader that text was cut.
const truncationMark = "…"

// userinfoInText matches "scheme://anything@" up to the last '@' before
// whitespace or a quote. It is deliberately greedy: cutting too much of a
// log line is harmless, leaking a password that contains '@' or '/' is not.
var userinfoInText = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^\s"'<>]*@`)

// redactURL replaces the userinfo of a proxy URL. It works on the text
// rather than with net/url because proxy settings are often not valid URLs
// ("user:pass@host:3128" parses as scheme "user"), and anything up to the
// last '@' is treated as userinfo, since proxy URLs have no other use for it.
func redactURL(s string) string {
	prefix, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	i := strings.LastIndexByte(rest, '@')
	if i < 0 {
		return s
	}
	return prefix + redactedUserinfo + rest[i:]
}

// redactText redacts the userinfo of every URL in free text such as an
// error message or a log excerpt.
func redactText(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return userinfoInText.ReplaceAllString(s, "${1}"+redactedUserinfo+"@")
}

// boundHead keeps the beginning of s, at most maxText bytes plus the mark.
func boundHead(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := maxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncationMark
}

// boundTail keeps the end of s, where fatal log lines are.
func boundTail(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := len(s) - maxText
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return truncationMark + s[cut:]
}
