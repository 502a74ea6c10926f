package event

import (
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/redact"
)

// maxText bounds every free-text payload field (messages, excerpts, errors):
// Kubernetes caps termination messages at 4 KiB too, and a bounded payload
// keeps events far below MaxSize whatever the cluster reports.
const maxText = 4096

// truncationMark shows a reader that text was cut.
const truncationMark = "…"

// Credentials in proxy URLs and free text are masked by package redact (the
// one fuzzed implementation), keeping the fact that the proxy uses
// authentication visible, which matters when diagnosing 407 responses.
func redactURL(s string) string  { return redact.RedactURL(s) }
func redactText(s string) string { return redact.RedactText(s) }

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
