package bench

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/internal/testenv"
)

// env is the control plane, started only when benchmarks run: make test
// runs this package's unit tests without one.
var env *testenv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	testenv.Main(m, &env)
}

// quick reports whether the scenarios run small (HCPBOT_BENCH_QUICK).
func quick() bool { v := os.Getenv("HCPBOT_BENCH_QUICK"); return v != "" && v != "0" }

// pick returns small in quick runs, full otherwise.
func pick[T any](full, small T) T {
	if quick() {
		return small
	}
	return full
}

// outDir is where results and profiles go.
func outDir(b testing.TB) string {
	b.Helper()
	dir := os.Getenv("HCPBOT_BENCH_OUT")
	if dir == "" {
		dir = "out"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return dir
}

// newResult starts a result marked quick when the run is.
func newResult(id, name string, params map[string]any) *Result {
	r := NewResult(id, name, params)
	r.Quick = quick()
	return r
}

// save writes r into results.json and logs its table.
func save(b testing.TB, r *Result) {
	b.Helper()
	path := filepath.Join(outDir(b), "results.json")
	if err := Write(path, r); err != nil {
		b.Fatalf("write %s: %v", path, err)
	}
	var sb strings.Builder
	_ = Table(&sb, []Result{*r})
	b.Log("\n" + sb.String())
}

// cpuProfile profiles the CPU from now until the returned function is
// called, into <out>/<id>.cpu.pprof, and records the file in r.
func cpuProfile(b testing.TB, r *Result, name string) (stop func()) {
	b.Helper()
	path := filepath.Join(outDir(b), name+".cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		// Another profile runs (go test -cpuprofile): skip ours.
		f.Close()
		os.Remove(path)
		r.Note("CPU profile %s not written: %v", name, err)
		return func() {}
	}
	r.Profiles = append(r.Profiles, filepath.Base(path))
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// heapProfile writes the live heap into <out>/<name>.heap.pprof.
func heapProfile(b testing.TB, r *Result, name string) {
	b.Helper()
	runtime.GC()
	lastHeapProfile(b, r, name)
}

// lastHeapProfile writes the heap profile as of the last collection,
// without forcing one: what was live when the runtime last looked.
func lastHeapProfile(b testing.TB, r *Result, name string) {
	b.Helper()
	path := filepath.Join(outDir(b), name+".heap.pprof")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
	r.Profiles = append(r.Profiles, filepath.Base(path))
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// rss returns the process's resident set size in bytes (Linux), 0 elsewhere.
func rss() uint64 { return procRSS("self") }

// countTo consumes cons until n messages arrived, closing done then; got
// counts them. Stop the returned context with cc.Stop.
func countTo(b testing.TB, cons jetstream.Consumer, n int64) (done <-chan struct{}, got *atomic.Int64, cc jetstream.ConsumeContext) {
	b.Helper()
	got = new(atomic.Int64)
	ch := make(chan struct{})
	cc, err := cons.Consume(func(jetstream.Msg) {
		if got.Add(1) == n {
			close(ch)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	return ch, got, cc
}

// counterSum adds up every series of a counter family.
func counterSum(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
