package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Figure is one measured value.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Target is a limit a figure must meet (Op is ">=" or "<=").
type Target struct {
	Figure string  `json:"figure"`
	Op     string  `json:"op"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
	// Actual is the figure's value when the target was judged.
	Actual float64 `json:"actual"`
}

// Machine describes where a result was measured.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"goVersion"`
	CPUModel  string `json:"cpuModel,omitempty"`
	Commit    string `json:"commit,omitempty"`
}

// Result is what one benchmark measured.
type Result struct {
	ID         string         `json:"id"`
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Quick      bool           `json:"quick,omitempty"`
	Parameters map[string]any `json:"parameters"`
	Figures    []Figure       `json:"figures"`
	Targets    []Target       `json:"targets,omitempty"`
	Notes      []string       `json:"notes,omitempty"`
	Profiles   []string       `json:"profiles,omitempty"`
	Machine    Machine        `json:"machine"`
}

// NewResult starts the result of benchmark id.
func NewResult(id, name string, params map[string]any) *Result {
	if params == nil {
		params = map[string]any{}
	}
	return &Result{ID: id, Name: name, Time: time.Now().UTC(), Parameters: params, Machine: machine()}
}

// Add records a figure (NaN and infinities, which JSON cannot hold, as 0
// with a note).
func (r *Result) Add(name string, v float64, unit string) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		r.Notes = append(r.Notes, fmt.Sprintf("%s was not a number (%v)", name, v))
		v = 0
	}
	for i := range r.Figures {
		if r.Figures[i].Name == name {
			r.Figures[i] = Figure{name, v, unit}
			return
		}
	}
	r.Figures = append(r.Figures, Figure{name, v, unit})
}

// Value returns a recorded figure.
func (r *Result) Value(name string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// Want judges a recorded figure against a target; a missing figure, or any
// figure of a quick run, does not meet it.
func (r *Result) Want(figure, op string, limit float64) {
	v, ok := r.Value(figure)
	met := ok && !r.Quick
	switch op {
	case ">=":
		met = met && v >= limit
	case "<=":
		met = met && v <= limit
	default:
		panic("bench: target op " + op)
	}
	r.Targets = append(r.Targets, Target{Figure: figure, Op: op, Value: limit, Met: met, Actual: v})
}

// Note adds a line of explanation.
func (r *Result) Note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

// Met reports whether every target was met.
func (r *Result) Met() bool {
	for _, t := range r.Targets {
		if !t.Met {
			return false
		}
	}
	return true
}

// Write merges r into the results file at path: a result with the same id
// is replaced, the others are kept, so benchmarks can be rerun one by one.
// The file is replaced atomically.
func Write(path string, r *Result) error {
	all, err := Read(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	kept := all[:0]
	for _, o := range all {
		if o.ID != r.ID {
			kept = append(kept, o)
		}
	}
	kept = append(kept, *r)
	sort.Slice(kept, func(i, j int) bool { return kept[i].ID < kept[j].ID })
	data, err := json.MarshalIndent(kept, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".results-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Read returns the results stored at path.
func Read(path string) ([]Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rs []Result
	if err := json.Unmarshal(data, &rs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

// Table writes the results as a readable table: one block per benchmark,
// its figures, then its targets with met or MISSED.
func Table(w io.Writer, rs []Result) error {
	for _, r := range rs {
		quick := ""
		if r.Quick {
			quick = " (quick run: not comparable)"
		}
		fmt.Fprintf(w, "%s  %s%s\n", r.ID, r.Name, quick)
		if len(r.Parameters) > 0 {
			keys := make([]string, 0, len(r.Parameters))
			for k := range r.Parameters {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = fmt.Sprintf("%s=%v", k, r.Parameters[k])
			}
			fmt.Fprintf(w, "    parameters: %s\n", strings.Join(parts, " "))
		}
		width := 0
		for _, f := range r.Figures {
			width = max(width, len(f.Name))
		}
		for _, f := range r.Figures {
			fmt.Fprintf(w, "    %-*s %14s %s\n", width, f.Name, format(f.Value), f.Unit)
		}
		for _, t := range r.Targets {
			verdict := "met"
			if !t.Met {
				verdict = "MISSED"
			}
			fmt.Fprintf(w, "    target %s %s %s: %s (%s)\n", t.Figure, t.Op, format(t.Value), verdict, format(t.Actual))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "    note: %s\n", n)
		}
		fmt.Fprintln(w)
	}
	return nil
}

func format(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(),
		Commit: os.Getenv("HCPBOT_BENCH_COMMIT")}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
