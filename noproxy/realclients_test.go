package noproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests confirm the Curl and Python models against the real tools
// when they are installed. No traffic leaves loopback: Python's
// requests.utils.should_bypass_proxies needs no network at all, and curl's
// proxy as well as every direct connection (--connect-to) point at a
// listener on 127.0.0.1 that records which of the two it saw.

// cleanEnv drops every proxy variable so only the list under test counts.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(k), "_proxy") || k == "REQUEST_METHOD" || k == "CURL_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

const pythonScript = `
import json, os, sys
for k in list(os.environ):
    if k.lower().endswith("_proxy") or k == "REQUEST_METHOD":
        del os.environ[k]
import requests
from requests.utils import should_bypass_proxies
out = []
for no_proxy, url in json.load(sys.stdin):
    try:
        out.append("direct" if should_bypass_proxies(url, no_proxy) else "proxy")
    except Exception as e:
        out.append("error: " + type(e).__name__)
json.dump({"version": requests.__version__, "results": out}, sys.stdout)
`

// realPython runs requests.utils.should_bypass_proxies on every case in one
// process; it skips the test when python3 or requests is missing.
func realPython(t *testing.T, cases [][2]string) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: Python column not confirmed against requests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	probe := exec.CommandContext(ctx, py, "-c", "import requests")
	probe.Env = cleanEnv()
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("python3 cannot import requests (%v: %s): Python column not confirmed", err, bytes.TrimSpace(out))
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, "-c", pythonScript)
	cmd.Env = cleanEnv()
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v: %s", err, stderr.String())
	}
	var res struct {
		Version string   `json:"version"`
		Results []string `json:"results"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Results) != len(cases) {
		t.Fatalf("python3 output %q: %v", out, err)
	}
	if !strings.HasPrefix(res.Version, "2.34") {
		t.Logf("note: the model follows requests 2.34, python3 has %s", res.Version)
	}
	return res.Results
}

func TestPythonColumnAgainstRealRequests(t *testing.T) {
	cases := make([][2]string, len(decisionTable))
	for i, r := range decisionTable {
		cases[i] = [2]string{r.noProxy, r.url}
	}
	got := realPython(t, cases)
	for i, r := range decisionTable {
		if got[i] != r.python.String() {
			t.Errorf("requests says %s for no_proxy=%q url=%q, table says %v", got[i], r.noProxy, r.url, r.python)
		}
	}
}

func TestPythonModelAgainstRealRequestsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(2026, 7))
	var cases [][2]string
	for len(cases) < 3000 {
		np, u := genCase(r)
		cases = append(cases, [2]string{np, u})
	}
	got := realPython(t, cases)
	bad := 0
	tally := map[string]int{}
	defer func() { t.Logf("outcomes: %v", tally) }()
	for i, c := range cases {
		want := "error"
		if d, err := Decide(Python, c[0], c[1]); err == nil {
			want = d.String()
		}
		if strings.HasPrefix(got[i], "error") {
			got[i] = "error"
		}
		tally[got[i]]++
		if got[i] != want && bad < 20 {
			bad++
			t.Errorf("no_proxy=%q url=%q: requests %s, model %s", c[0], c[1], got[i], want)
		}
	}
}

// loopbackRecorder is the only peer curl ever talks to: it answers as proxy
// and as origin and reports which role each connection asked for.
type loopbackRecorder struct {
	ln   net.Listener
	seen chan string
}

func newLoopbackRecorder(t *testing.T) *loopbackRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &loopbackRecorder{ln: ln, seen: make(chan string, 16)}
	t.Cleanup(func() { ln.Close() })
	go rec.serve()
	return rec
}

func (rec *loopbackRecorder) port() string {
	return strconv.Itoa(rec.ln.Addr().(*net.TCPAddr).Port)
}

func (rec *loopbackRecorder) serve() {
	for {
		c, err := rec.ln.Accept()
		if err != nil {
			return
		}
		go rec.handle(c)
	}
}

func (rec *loopbackRecorder) handle(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		rec.seen <- "error: " + err.Error()
		return
	}
	if first[0] == 0x16 { // TLS ClientHello: curl talks to the origin
		rec.seen <- "direct"
		return
	}
	line, err := br.ReadString('\n')
	if err != nil {
		rec.seen <- "error: " + err.Error()
		return
	}
	fields := strings.Fields(line)
	switch {
	case len(fields) < 2:
		rec.seen <- "error: bad request line " + strconv.Quote(line)
	case fields[0] == "CONNECT" || strings.Contains(fields[1], "://"):
		rec.seen <- "proxy"
		_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	default:
		rec.seen <- "direct"
		_, _ = c.Write([]byte("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"))
	}
}

var curlVersionRE = regexp.MustCompile(`^curl (\d+)\.(\d+)\.(\d+)`)

// realCurl returns a function that reports where curl sent rawURL; it
// skips the test when curl is missing or its version is not the modelled
// one (7.86–8.8).
func realCurl(t *testing.T) func(noProxy, rawURL string) string {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed: curl column not confirmed")
	}
	out, err := exec.Command(curl, "--version").Output()
	if err != nil {
		t.Skipf("curl --version: %v", err)
	}
	m := curlVersionRE.FindStringSubmatch(string(out))
	if m == nil {
		t.Skipf("cannot read curl version from %q", out)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if v := major*100 + minor; v < 786 || v >= 809 {
		t.Skipf("curl %s.%s.%s: the model is for curl 7.86–8.8 (CIDR support, blank-separated lists)", m[1], m[2], m[3])
	}
	rec := newLoopbackRecorder(t)
	home := t.TempDir()
	return func(noProxy, rawURL string) string {
		t.Helper()
		for len(rec.seen) > 0 {
			<-rec.seen
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, curl, "-q", "-s", "-o", os.DevNull, "--max-time", "5",
			"--proxy", "http://127.0.0.1:"+rec.port(), "--noproxy", noProxy,
			"--connect-to", "::127.0.0.1:"+rec.port(), rawURL)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
		runErr := cmd.Run()
		var exit *exec.ExitError
		if errors.As(runErr, &exit) && exit.ExitCode() == 3 {
			return "error: curl rejected the URL (exit 3)"
		}
		select {
		case s := <-rec.seen:
			return s
		case <-time.After(time.Second): // curl has exited; a connection would have been recorded
			return fmt.Sprintf("error: no connection (%v)", runErr)
		}
	}
}

func TestCurlColumnAgainstRealCurl(t *testing.T) {
	run := realCurl(t)
	for _, r := range decisionTable {
		if got := run(r.noProxy, r.url); got != r.curl.String() {
			t.Errorf("curl says %s for --noproxy %q %s, table says %v", got, r.noProxy, r.url, r.curl)
		}
	}
}

func TestCurlModelAgainstRealCurlRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns 150 curl processes")
	}
	run := realCurl(t)
	r := rand.New(rand.NewPCG(86, 88))
	tally := map[string]int{}
	defer func() { t.Logf("outcomes: %v", tally) }()
	for i := 0; i < 150; i++ {
		np, u := genCase(r)
		want := "error"
		if d, err := Decide(Curl, np, u); err == nil {
			want = d.String()
		}
		got := run(np, u)
		if strings.HasPrefix(got, "error") {
			got = "error"
		}
		tally[got]++
		if got != want {
			t.Errorf("--noproxy %q %s: curl %s, model %s", np, u, got, want)
		}
	}
}
