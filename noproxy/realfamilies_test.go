package noproxy

import (
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
	"strconv"
	"strings"
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
// hosts and to the recorder's port (or to ports wget rejects before
// connecting), and the test refuses to run anything else.
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

// realWget returns a function that runs wget once and reports whether it
// asked the proxy or the origin. Proxy and origin are the same loopback
// listener; wget's config files are disabled.
func realWget(t *testing.T) (run func(noProxy, rawURL string) string, port string) {
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
	rec := newLoopbackRecorder(t)
	home := t.TempDir()
	return func(noProxy, rawURL string) string {
		t.Helper()
		for len(rec.seen) > 0 {
			<-rec.seen
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, wget, "--no-config", "-q", "-O", os.DevNull, "-t", "1", "-T", "5",
			"--no-check-certificate", "-e", "use_proxy=on",
			"-e", "http_proxy=http://127.0.0.1:"+rec.port(), "-e", "https_proxy=http://127.0.0.1:"+rec.port(), rawURL)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C", "no_proxy=" + noProxy}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		runErr := cmd.Run()
		var exit *exec.ExitError
		if errors.As(runErr, &exit) && exit.ExitCode() == 1 && len(rec.seen) == 0 {
			return "error: wget rejected the URL (exit 1)"
		}
		select {
		case s := <-rec.seen:
			return s
		case <-time.After(time.Second): // wget has exited; a connection would have been recorded
			return fmt.Sprintf("error: no connection (%v: %s)", runErr, bytes.TrimSpace(stderr.Bytes()))
		}
	}, rec.port()
}

// wgetCase rewrites a generated case for wget: the host becomes a safe
// loopback host derived from the generated one, the port the recorder's
// (or one wget refuses before connecting).
func wgetCase(r *rand.Rand, port string) (noProxy, rawURL string) {
	hosts := []string{"127.0.0.1", "localhost", "LOCALHOST", "LocalHost"}
	host := hosts[r.IntN(len(hosts))]
	entries := []string{"127.0.0.1", "0.0.1", ".0.1", "7.0.0.1", "127.0.0.0/8", "127.0.0.1:" + port, "127.1", "127.0.0.01", "27.0.0.1", "127.0.0.1.",
		"localhost", ".localhost", "LOCALHOST", "host", ".host", "*", "*.localhost", "localhost.", "", " ",
		"127.0.0.", "0.0.0.1", "1", ".1", "2.3", "127.10.0.1", "localhost:" + port, "127.0.0.2/32"}
	seps := []string{",", ", ", " ,", ",  ", ",\t"}
	var b strings.Builder
	if r.IntN(6) == 0 {
		b.WriteString(" ")
	}
	for i, n := 0, 1+r.IntN(3); i < n; i++ {
		if i > 0 {
			b.WriteString(seps[r.IntN(len(seps))])
		}
		if r.IntN(3) == 0 {
			b.WriteString(host)
		} else {
			b.WriteString(entries[r.IntN(len(entries))])
		}
	}
	p := port
	switch r.IntN(12) {
	case 0:
		p = "0"
	case 1:
		p = "99999"
	}
	scheme := "http"
	if r.IntN(2) == 0 {
		scheme = "https"
	}
	return b.String(), scheme + "://" + host + ":" + p + "/"
}

func TestWgetModelAgainstRealWget(t *testing.T) {
	run, port := realWget(t)
	n := 200
	if testing.Short() {
		n = 40
	}
	r := rand.New(rand.NewPCG(121, 3))
	tally := map[string]int{}
	defer func() { t.Logf("outcomes: %v", tally) }()
	fixed := [][2]string{
		{"*", "http://127.0.0.1:" + port + "/"},           // no wildcard in wget
		{"127.0.0.0/8", "http://127.0.0.1:" + port + "/"}, // no CIDRs
		{".0.1", "https://127.0.0.1:" + port + "/"},       // textual suffix
	}
	for i := 0; i < n+len(fixed); i++ {
		var np, u string
		if i < len(fixed) {
			np, u = fixed[i][0], fixed[i][1]
		} else {
			np, u = wgetCase(r, port)
		}
		host, p := wgetURLHostPort(t, u)
		if !wgetSafeHost(host) || (p != port && p != "0" && p != "99999") {
			t.Fatalf("refusing to run wget on %q: not a loopback-only target", u)
		}
		want, _ := modelAnswer(Wget, np, u)
		got := run(np, u)
		if p == "0" && strings.HasPrefix(got, "error: no connection") {
			got = "direct" // wget dialled 127.0.0.1:0 itself, which fails locally; the proxy saw nothing
		}
		if strings.HasPrefix(got, "error") {
			if p != "99999" {
				t.Errorf("no_proxy=%q %s: %s", np, u, got) // only the out-of-range port may fail
			}
			got = "error"
		}
		tally[got]++
		if got != want {
			t.Errorf("no_proxy=%q %s: wget %s, model %s", np, u, got, want)
		}
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
