// Command chaostable prints the report of the fault and abuse suite (the
// JSON lines chaosreport.Log appends to HCPBOT_CHAOS_REPORT) as a table:
// one row per case, its figures sorted by name.
//
//	go run ./internal/testenv/chaosreport/cmd/chaostable bench/out/chaos.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chaostable REPORT.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaostable:", err)
		os.Exit(1)
	}
	defer f.Close()
	entries, err := read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaostable:", err)
		os.Exit(1)
	}
	failed := print(os.Stdout, entries)
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "chaostable: %d case(s) recorded as failed\n", failed)
		os.Exit(1)
	}
}

func read(r io.Reader) ([]chaosreport.Entry, error) {
	var out []chaosreport.Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(strings.TrimPrefix(sc.Text(), chaosreport.Prefix))
		if line == "" {
			continue
		}
		var e chaosreport.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// print writes the table and returns how many entries were failed.
func print(w io.Writer, entries []chaosreport.Entry) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tVARIANT\tFIGURES")
	failed := 0
	for _, e := range entries {
		result, variant := "ok", "short"
		if e.Failed {
			result = "FAILED"
			failed++
		}
		if e.Long {
			variant = "long"
		}
		keys := make([]string, 0, len(e.Figures))
		for k := range e.Figures {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		figs := make([]string, 0, len(keys))
		for _, k := range keys {
			figs = append(figs, k+"="+value(e.Figures[k]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Case, result, variant, strings.Join(figs, " "))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d case(s), %d failed\n", len(entries), failed)
	return failed
}

func value(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		if v == float64(int64(v)) {
			return fmt.Sprintf("%d", int64(v))
		}
		return fmt.Sprintf("%g", v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
