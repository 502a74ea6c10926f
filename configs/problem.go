package configs

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a configuration file, located precisely
// enough that an operator can fix it without guessing: the file, the line
// (and column) of the offending node, and the field's path as written in
// YAML ("slack.approvers[1]", "digests[0].schedule").
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`   // 1-based; 0 when the problem concerns the whole file
	Column  int    `json:"column,omitempty"` // 1-based; 0 when unknown
	Field   string `json:"field,omitempty"`  // YAML path; empty for whole-file problems
	Message string `json:"message"`
}

// String renders "file:line: field: message", the form editors and CI logs
// turn into links.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error is what Parse and Load return when a configuration is invalid. It
// holds every problem found, so one run of `hcpbot config check` shows the
// whole list instead of one fix-and-retry round per mistake.
type Error struct {
	Problems []Problem
}

// Error lists the problems one per line, in file order.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// sortProblems orders problems by position so the output reads top to
// bottom like the file; the sort is stable so problems on one node keep the
// order in which the checks found them.
func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Column < ps[j].Column
	})
}
