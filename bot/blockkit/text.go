package blockkit

import (
	"strings"
	"unicode/utf8"
)

// ellipsis marks a cut; one character, so limits stay easy to reason about.
const ellipsis = "…"

// Truncate cuts s to at most limit characters (runes), marking the cut with
// "…". It never splits a rune, a mrkdwn link or mention ("<…>") or an HTML
// entity ("&amp;"), and closes a code block ("```") the cut left open, so a
// truncated text still renders instead of swallowing the rest of the
// message.
func Truncate(s string, limit int) string {
	if limit <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	r := []rune(s)
	if limit == 1 { // no room for niceties
		return string(r[:limit])
	}
	cut := safeCut(r, limit-1)
	if strings.Count(string(r[:cut]), "```")%2 == 1 {
		const closer = "\n```"
		cut = safeCut(r, max(limit-1-len(closer), 0))
		if strings.Count(string(r[:cut]), "```")%2 == 1 {
			return string(r[:cut]) + ellipsis + closer
		}
	}
	return string(r[:cut]) + ellipsis
}

// safeCut returns n, or less if the n-th rune falls inside "<…>" or an
// entity; a link is dropped whole rather than cut into broken markup.
func safeCut(r []rune, n int) int {
	n = min(n, len(r))
	head := r[:n]
	if lt := lastIndex(head, '<'); lt >= 0 && lastIndex(head, '>') < lt {
		n = lt
	}
	if amp := lastIndex(r[:n], '&'); amp >= 0 && n-amp <= 8 && lastIndex(r[:n], ';') < amp {
		n = amp
	}
	// Cutting after a lone newline or space only wastes the budget.
	for n > 0 && (r[n-1] == ' ' || r[n-1] == '\n') {
		n--
	}
	return n
}

func lastIndex(r []rune, c rune) int {
	for i := len(r) - 1; i >= 0; i-- {
		if r[i] == c {
			return i
		}
	}
	return -1
}

// SplitText splits s into chunks of at most limit characters, at line
// breaks where possible, for rendering long text as several sections
// instead of truncating it.
func SplitText(s string, limit int) []string {
	if limit <= 0 || s == "" {
		return nil
	}
	var out []string
	s = strings.TrimRight(s, "\n")
	for utf8.RuneCountInString(s) > limit {
		r := []rune(s)
		cut := lastIndex(r[:limit], '\n')
		if cut <= 0 {
			cut = safeCut(r, limit)
			if cut == 0 {
				cut = limit
			}
		}
		out = append(out, strings.TrimRight(string(r[:cut]), "\n"))
		s = strings.TrimLeft(string(r[cut:]), "\n")
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
