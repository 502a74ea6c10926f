// Command benchtable prints bench/out/results.json (or the file named) as
// the table `make bench` ends with, and a last line counting the targets
// met and missed. Benchmarks report: a missed target is in the table, not
// in the exit code.
package main

import (
	"fmt"
	"os"

	"github.com/hcpbot/hcpbot/bench"
)

func main() {
	path := "bench/out/results.json"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	rs, err := bench.Read(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	_ = bench.Table(os.Stdout, rs)
	met, missed := 0, 0
	for _, r := range rs {
		for _, t := range r.Targets {
			if t.Met {
				met++
			} else {
				missed++
			}
		}
	}
	fmt.Printf("%d benchmarks, targets: %d met, %d missed\n", len(rs), met, missed)
}
