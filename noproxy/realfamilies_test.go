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
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests confirm the Urllib, Wget and Node models against the real
// clients. Python's ProxyHandler and proxy-from-env decide without any
// network; wget is run for real, with its proxy and every direct target on
// a loopback listener (see realWget for why it can never dial elsewhere).
//
// A missing client skips the test on a developer machine but fails it in
// CI (CI=true), so that a green CI run means the models were confirmed.

func missingClient(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// genFamilyCase extends genCase with the corners of the new families:
// userinfo (urllib compares the whole netloc), "*" inside names, bracketed
// IPv6 entries, port 0 and blanks before commas.
func genFamilyCase(r *rand.Rand) (noProxy, rawURL string) {
	noProxy, rawURL = genCase(r)
	extra := []string{"*example.com", "[::1]", "[2001:db8::1]", "[2001:db8::1]:443", "::1", "example.com:0",
		".", "*", "a ,b", " example.com", "example.com ", ".example.com:8080", "*.com", "127.0.0.1", "0.0.1", "7.0.0.1"}
	if r.IntN(3) == 0 {
		if noProxy != "" {
			noProxy += ","
		}
		noProxy += extra[r.IntN(len(extra))]
	}
	if r.IntN(8) == 0 {
		scheme, rest, _ := strings.Cut(rawURL, "://")
		rawURL = scheme + "://" + []string{"u@", "u:p@", "u:p%40x@"}[r.IntN(3)] + rest
	}
	return noProxy, rawURL
}

func modelAnswer(c Client, noProxy, rawURL string) (string, bool) {
	d, err := Decide(c, noProxy, rawURL)
	if errors.Is(err, ErrUnsupportedInput) {
		return "", false // the real client cannot even receive it
	}
	if err != nil {
		return "error", true
	}
	return d.String(), true
}

// compareRandom checks the model of c against real on n generated cases.
func compareRandom(t *testing.T, c Client, seed uint64, n int, keep func(np, u string) bool, real func([][2]string) []string) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(c)))
	var cases [][2]string
	var want []string
	for len(cases) < n {
		np, u := genFamilyCase(r)
		if keep != nil && !keep(np, u) {
			continue
		}
		w, ok := modelAnswer(c, np, u)
		if !ok {
			continue
		}
		cases = append(cases, [2]string{np, u})
		want = append(want, w)
	}
	got := real(cases)
	tally := map[string]int{}
	bad := 0
	for i, cs := range cases {
		g := got[i]
		if strings.HasPrefix(g, "error") {
			g = "error"
		}
		tally[g]++
		if g != want[i] {
			bad++
			if bad <= 20 {
				t.Errorf("%v: no_proxy=%q url=%q: real %s, model %s", c, cs[0], cs[1], got[i], want[i])
			}
		}
	}
	t.Logf("%d cases, outcomes %v, %d disagreements", len(cases), tally, bad)
}

const urllibScript = `
import json, os, sys, urllib.request
for k in list(os.environ):
    if k.lower().endswith("_proxy") or k == "REQUEST_METHOD":
        del os.environ[k]
out = []
for no_proxy, url in json.load(sys.stdin):
    os.environ["no_proxy"] = no_proxy
    os.environ["http_proxy"] = os.environ["https_proxy"] = "http://127.0.0.1:9"
    try:
        h = urllib.request.ProxyHandler()
        req = urllib.request.Request(url)
        before = req.host
        getattr(h, req.type + "_open")(req)
        out.append("proxy" if (req.host != before or req._tunnel_host) else "direct")
    except Exception as e:
        out.append("error: " + type(e).__name__ + ": " + str(e))
json.dump(out, sys.stdout)
`

// realUrllib runs urllib.request.ProxyHandler on every case in one python3
// process: proxy_open rewrites the request for the proxy or leaves it be.
func realUrllib(t *testing.T) func([][2]string) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		missingClient(t, "python3 not installed: urllib column not confirmed")
	}
	return func(cases [][2]string) []string {
		t.Helper()
		in, err := json.Marshal(cases)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, "-c", urllibScript)
		cmd.Env = cleanEnv()
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python3: %v: %s", err, stderr.String())
		}
		var res []string
		if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
			t.Fatalf("python3 output %q: %v", out, err)
		}
		return res
	}
}

func TestUrllibModelAgainstRealUrllib(t *testing.T) {
	real := realUrllib(t)
	compareRandom(t, Urllib, 3011, 5000, nil, real)
}

func TestUrllibTableAgainstRealUrllib(t *testing.T) {
	real := realUrllib(t)
	var cases [][2]string
	for _, r := range familyTable {
		cases = append(cases, [2]string{r.noProxy, r.url})
	}
	got := real(cases)
	for i, r := range familyTable {
		if got[i] != r.urllib.String() {
			t.Errorf("urllib says %s for no_proxy=%q url=%q, table says %v", got[i], r.noProxy, r.url, r.urllib)
		}
	}
}

const nodeScript = `
import { getProxyForUrl } from "proxy-from-env";
import { readFileSync } from "node:fs";
const cases = JSON.parse(readFileSync(0, "utf8"));
for (const k of Object.keys(process.env)) {
  if (k.toLowerCase().endsWith("_proxy")) delete process.env[k];
}
process.env.http_proxy = process.env.https_proxy = "http://127.0.0.1:9";
const out = cases.map(([noProxy, url]) => {
  try { new URL(url); } catch (e) { return "error: " + e.code; }
  process.env.no_proxy = noProxy;
  return getProxyForUrl(url) ? "proxy" : "direct";
});
process.stdout.write(JSON.stringify({ version: process.version, results: out }));
`

// proxyFromEnvVersion is the package version the Node model follows.
const proxyFromEnvVersion = "2.1.0"

// realNode installs proxy-from-env into a temporary directory (npm's cache
// under the user cache directory keeps reruns offline) and runs
// getProxyForUrl on every case in one node process.
func realNode(t *testing.T) func([][2]string) []string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missingClient(t, "node not installed: node column not confirmed")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missingClient(t, "npm not installed: cannot install proxy-from-env")
	}
	dir := t.TempDir()
	cache := filepath.Join(t.TempDir(), "npm-cache")
	if d, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(d, "hcpbot", "npm-cache")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "install", "--prefer-offline", "--no-audit", "--no-fund",
		"--no-save", "--cache", cache, "--prefix", dir, "proxy-from-env@"+proxyFromEnvVersion)
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		missingClient(t, "npm install proxy-from-env@%s: %v: %s", proxyFromEnvVersion, err, out)
	}
	script := filepath.Join(dir, "decide.mjs")
	if err := os.WriteFile(script, []byte(nodeScript), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(cases [][2]string) []string {
		t.Helper()
		in, err := json.Marshal(cases)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, script)
		cmd.Dir = dir
		cmd.Env = cleanEnv()
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v: %s", err, stderr.String())
		}
		var res struct {
			Version string   `json:"version"`
			Results []string `json:"results"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.Results) != len(cases) {
			t.Fatalf("node output %q: %v", out, err)
		}
		return res.Results
	}
}

func TestNodeModelAgainstRealProxyFromEnv(t *testing.T) {
	real := realNode(t)
	compareRandom(t, Node, 2010, 5000, nil, real)
}

func TestNodeTableAgainstRealProxyFromEnv(t *testing.T) {
	real := realNode(t)
	var cases [][2]string
	for _, r := range familyTable {
		cases = append(cases, [2]string{r.noProxy, r.url})
	}
	got := real(cases)
	for i, r := range familyTable {
		if got[i] != r.node.String() {
			t.Errorf("proxy-from-env says %s for no_proxy=%q url=%q, table says %v", got[i], r.noProxy, r.url, r.node)
		}
	}
}

var wgetVersionRE = regexp.MustCompile(`GNU Wget (\d+)\.(\d+)`)

// wgetSafeHost reports hosts wget can only ever reach on loopback without
// asking DNS: IPv4 dotted quads in 127/8 (getaddrinfo parses them itself)
// and names /etc/hosts maps to 127.0.0.1 here (nsswitch "files" first).
// wget has no --resolve/--connect-to, so every direct connection goes to
// the URL's own host; the generated wget cases are restricted to these
// hosts and to the batch's listener ports (or to ports that fail before
// leaving the machine), and the test refuses to run anything else.
func wgetSafeHost(host string) bool {
	if a, err := netipParseV4(host); err == nil {
		return a[0] == 127
	}
	switch strings.ToLower(host) {
	case "localhost":
		return true // not "localhost.": /etc/hosts does not answer it, DNS would be asked
	}
	return false
}

func netipParseV4(s string) ([4]byte, error) {
	ip := net.ParseIP(s)
	if ip == nil || ip.To4() == nil || strings.Contains(s, ":") {
		return [4]byte{}, fmt.Errorf("not IPv4: %q", s)
	}
	return [4]byte(ip.To4()), nil
}

// wgetSlots is how many URLs one wget run fetches. wget takes many URLs
// and, with -t 1, goes on after a failed one; one process per case (~90 ms
// on a busy box) would allow only a few hundred cases in the time a few
// thousand take in batches.
const wgetSlots = 16

// wgetEvent is what one loopback listener saw: the origin listener of
// slot port was asked directly, or the proxy was asked for a URL naming
// port. Any other request is kind "error: ...".
type wgetEvent struct {
	kind string // "direct", "proxy" or "error: ..."
	port string // the slot listener's port (direct) or the port the proxy request names
}

// wgetLog collects the events of one batch. Every event is appended
// before the listener answers, and wget waits for that answer before it
// moves on, so once wget has exited the log is complete.
type wgetLog struct {
	mu sync.Mutex
	ev []wgetEvent
}

func (l *wgetLog) add(e wgetEvent) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *wgetLog) take() []wgetEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.ev
	l.ev = nil
	return ev
}

// listenWget starts a loopback listener; proxy says whether it plays the
// proxy (requests name their target) or a slot's origin.
func listenWget(t *testing.T, log *wgetLog, proxy bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handleWget(c, log, proxy, port)
		}
	}()
	return port
}

func handleWget(c net.Conn, log *wgetLog, proxy bool, port string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		log.add(wgetEvent{"error: " + err.Error(), port})
		return
	}
	if first[0] == 0x16 { // TLS ClientHello: wget talks to the origin
		if proxy {
			log.add(wgetEvent{"error: TLS to the proxy", port})
		} else {
			log.add(wgetEvent{"direct", port})
		}
		return
	}
	line, err := br.ReadString('\n')
	if err != nil {
		log.add(wgetEvent{"error: " + err.Error(), port})
		return
	}
	fields := strings.Fields(line)
	var target string // host:port of a proxy request
	switch {
	case len(fields) < 2:
	case fields[0] == "CONNECT":
		target = fields[1]
	case strings.Contains(fields[1], "://"):
		_, rest, _ := strings.Cut(fields[1], "://")
		target, _, _ = strings.Cut(rest, "/")
	}
	switch {
	case len(fields) < 2:
		log.add(wgetEvent{"error: bad request line " + strconv.Quote(line), port})
	case proxy && target != "":
		_, p, err := net.SplitHostPort(target)
		if err != nil {
			log.add(wgetEvent{"error: proxy request without a port " + strconv.Quote(line), port})
			return
		}
		log.add(wgetEvent{"proxy", p})
		_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	case !proxy && target == "":
		log.add(wgetEvent{"direct", port})
		_, _ = c.Write([]byte("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"))
	default:
		log.add(wgetEvent{"error: unexpected request " + strconv.Quote(line), port})
	}
}

// realWget returns a function that runs wget once on a batch of URLs
// sharing one no_proxy and reports, per URL, whether wget asked the proxy
// or the origin, and the wget-side error if it did neither; ports are the
// slots' origin ports (at most one URL per port in a batch). wget's config
// files are disabled.
//
// wget has no --resolve/--connect-to, so every direct connection goes to
// the URL's own host and port: the caller runs only URLs on wgetSafeHost
// hosts and slot ports (or 0 and 99999, which fail before leaving the
// machine). A proxied URL is told apart by the port its request names.
func realWget(t *testing.T) (run func(noProxy string, urls []string) []string, ports []string) {
	t.Helper()
	wget, err := exec.LookPath("wget")
	if err != nil {
		missingClient(t, "wget not installed: wget column not confirmed")
	}
	out, err := exec.Command(wget, "--version").Output()
	if err != nil {
		missingClient(t, "wget --version: %v", err)
	}
	m := wgetVersionRE.FindStringSubmatch(string(out))
	if m == nil {
		missingClient(t, "cannot read the wget version from %q", out)
	}
	if major, _ := strconv.Atoi(m[1]); major != 1 {
		missingClient(t, "wget %s.%s: the model is for GNU Wget 1.21+", m[1], m[2])
	}
	log := &wgetLog{}
	proxy := listenWget(t, log, true)
	for range wgetSlots {
		ports = append(ports, listenWget(t, log, false))
	}
	home := t.TempDir()
	return func(noProxy string, urls []string) []string {
		t.Helper()
		byPort := map[string]int{}
		for i, u := range urls {
			host, p := wgetURLHostPort(t, u)
			if !wgetSafeHost(host) || !(slices.Contains(ports, p) || p == "0" || p == "99999") {
				t.Fatalf("refusing to run wget on %q: not a loopback-only target", u)
			}
			if _, dup := byPort[p]; dup {
				t.Fatalf("batch %q: two URLs on port %s could not be told apart", urls, p)
			}
			byPort[p] = i
		}
		_ = log.take()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := []string{"--no-config", "-q", "-O", os.DevNull, "-t", "1", "-T", "5",
			"--no-check-certificate", "-e", "use_proxy=on",
			"-e", "http_proxy=http://127.0.0.1:" + proxy, "-e", "https_proxy=http://127.0.0.1:" + proxy}
		cmd := exec.CommandContext(ctx, wget, append(args, urls...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C", "no_proxy=" + noProxy}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		runErr := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("wget on %d URLs did not finish: %v", len(urls), runErr)
		}
		got := make([]string, len(urls))
		for _, e := range log.take() {
			i, ok := byPort[e.port]
			switch {
			case strings.HasPrefix(e.kind, "error"):
				t.Errorf("no_proxy=%q: listener on port %s: %s", noProxy, e.port, e.kind)
			case !ok:
				t.Errorf("no_proxy=%q: wget went %s for port %s, which no URL of the batch names", noProxy, e.kind, e.port)
			case got[i] != "":
				t.Errorf("no_proxy=%q %s: wget connected twice (%s, then %s)", noProxy, urls[i], got[i], e.kind)
			default:
				got[i] = e.kind
			}
		}
		for i := range got {
			if got[i] == "" {
				got[i] = fmt.Sprintf("error: no connection (%v: %s)", runErr, bytes.TrimSpace(stderr.Bytes()))
			}
		}
		return got
	}, ports
}

// wgetBatch generates one no_proxy and a URL per slot for it: each host a
// safe loopback host, each port its slot's (or, once per batch at most,
// one wget refuses before connecting). Entries with a port name one of
// the batch's ports.
func wgetBatch(r *rand.Rand, ports []string) (noProxy string, urls []string) {
	hosts := []string{"127.0.0.1", "localhost", "LOCALHOST", "LocalHost"}
	entries := []string{"127.0.0.1", "0.0.1", ".0.1", "7.0.0.1", "127.0.0.0/8", "127.0.0.1:", "127.1", "127.0.0.01", "27.0.0.1", "127.0.0.1.",
		"localhost", ".localhost", "LOCALHOST", "host", ".host", "*", "*.localhost", "localhost.", "", " ",
		"127.0.0.", "0.0.0.1", "1", ".1", "2.3", "127.10.0.1", "localhost:", "127.0.0.2/32"}
	seps := []string{",", ", ", " ,", ",  ", ",\t"}
	var b strings.Builder
	if r.IntN(6) == 0 {
		b.WriteString(" ")
	}
	for i, n := 0, 1+r.IntN(3); i < n; i++ {
		if i > 0 {
			b.WriteString(seps[r.IntN(len(seps))])
		}
		e := entries[r.IntN(len(entries))]
		if r.IntN(3) == 0 {
			e = hosts[r.IntN(len(hosts))]
		}
		if strings.HasSuffix(e, ":") {
			e += ports[r.IntN(len(ports))]
		}
		b.WriteString(e)
	}
	special := map[string]bool{}
	for _, p := range ports {
		switch r.IntN(12) {
		case 0:
			if !special["0"] {
				p, special["0"] = "0", true
			}
		case 1:
			if !special["99999"] {
				p, special["99999"] = "99999", true
			}
		}
		scheme := "http"
		if r.IntN(2) == 0 {
			scheme = "https"
		}
		urls = append(urls, scheme+"://"+hosts[r.IntN(len(hosts))]+":"+p+"/")
	}
	return b.String(), urls
}

func TestWgetModelAgainstRealWget(t *testing.T) {
	run, ports := realWget(t)
	batches := 250 // × wgetSlots URLs: 4,000 generated cases
	if testing.Short() {
		batches = 3
	}
	r := rand.New(rand.NewPCG(121, 3))
	tally := map[string]int{}
	cases := 0
	defer func() { t.Logf("%d cases in %d wget runs; outcomes: %v", cases, batches+3, tally) }()
	p := ports[0]
	fixed := [][2]string{
		{"*", "http://127.0.0.1:" + p + "/"},           // no wildcard in wget
		{"127.0.0.0/8", "http://127.0.0.1:" + p + "/"}, // no CIDRs
		{".0.1", "https://127.0.0.1:" + p + "/"},       // textual suffix
	}
	check := func(np string, urls []string) {
		got := run(np, urls)
		for i, u := range urls {
			cases++
			_, port := wgetURLHostPort(t, u)
			want, _ := modelAnswer(Wget, np, u)
			g := got[i]
			if port == "0" && strings.HasPrefix(g, "error: no connection") {
				g = "direct" // wget dialled 127.0.0.1:0 itself, which fails locally; the proxy saw nothing
			}
			if strings.HasPrefix(g, "error") {
				if port != "99999" {
					t.Errorf("no_proxy=%q %s: %s", np, u, g) // only the out-of-range port may fail
				}
				g = "error"
			}
			tally[g]++
			if g != want {
				t.Errorf("no_proxy=%q %s: wget %s, model %s", np, u, g, want)
			}
		}
	}
	for _, f := range fixed {
		check(f[0], []string{f[1]})
	}
	for range batches {
		check(wgetBatch(r, ports))
	}
}

func wgetURLHostPort(t *testing.T, u string) (string, string) {
	t.Helper()
	_, rest, _ := strings.Cut(u, "://")
	hp, _, _ := strings.Cut(rest, "/")
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		t.Fatalf("%q: %v", u, err)
	}
	return h, p
}

// TestWgetIgnoresUpperCaseNoProxy: wget reads only no_proxy.
func TestWgetIgnoresUpperCaseNoProxy(t *testing.T) {
	wget, err := exec.LookPath("wget")
	if err != nil {
		missingClient(t, "wget not installed")
	}
	rec := newLoopbackRecorder(t)
	cmd := exec.Command(wget, "--no-config", "-q", "-O", os.DevNull, "-t", "1", "-T", "5", "-e", "use_proxy=on",
		"-e", "http_proxy=http://127.0.0.1:"+rec.port(), "http://127.0.0.1:"+rec.port()+"/")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_PROXY=127.0.0.1"}
	_ = cmd.Run()
	select {
	case s := <-rec.seen:
		if s != "proxy" {
			t.Fatalf("wget with only NO_PROXY=127.0.0.1 went %s; the model says wget ignores NO_PROXY", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wget made no connection")
	}
}
