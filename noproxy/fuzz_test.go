package noproxy

import (
	"errors"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

// TestGoModelMatchesHTTPProxyRandom runs the differential check of the fuzz
// target on generated corner cases in every ordinary test run.
func TestGoModelMatchesHTTPProxyRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 62))
	for i := 0; i < 20000; i++ {
		np, u := genCase(r)
		checkGoAgainstHTTPProxy(t, np, u)
	}
}

func checkGoAgainstHTTPProxy(t *testing.T, noProxy, rawURL string) {
	t.Helper()
	got, err := Decide(Go, noProxy, rawURL)
	if err != nil {
		if !errors.Is(err, ErrInvalidURL) && !errors.Is(err, ErrUnsupportedScheme) {
			t.Fatalf("Decide(Go, %q, %q): unexpected error %v", noProxy, rawURL, err)
		}
		return
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("Decide accepted %q that url.Parse rejects: %v", rawURL, err)
	}
	want, err := httpproxyDecision(noProxy, u)
	if err != nil {
		t.Fatalf("httpproxy(%q, %q): %v", noProxy, rawURL, err)
	}
	if got != want {
		t.Fatalf("Decide(Go, %q, %q) = %v, httpproxy says %v", noProxy, rawURL, got, want)
	}
}

func FuzzDecide(f *testing.F) {
	for _, r := range decisionTable {
		f.Add(r.noProxy, r.url)
	}
	f.Fuzz(func(t *testing.T, noProxy, rawURL string) {
		for _, c := range AllClients() {
			v, err := Explain(c, noProxy, rawURL)
			if err == nil && v.Decision != Direct && v.Decision != Proxy {
				t.Fatalf("Explain(%v, %q, %q) = %+v", c, noProxy, rawURL, v)
			}
		}
		checkGoAgainstHTTPProxy(t, noProxy, rawURL)
		checkFamiliesAgree(t, noProxy, rawURL)
	})
}

// TestFamiliesAgreeRandom runs the agreement properties of the fuzz target
// on random input in every ordinary test run.
func TestFamiliesAgreeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 26))
	alphabet := "ab.,*"
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for i := 0; i < 20000; i++ {
		checkFamiliesAgree(t, word(r.IntN(16)), word(1+r.IntN(8)))
	}
}

// fuzzName maps arbitrary bytes onto a lower-case DNS name over {a, b}
// ("" when nothing is left), so that the properties below hold whatever
// the fuzzer feeds in.
func fuzzName(s string) string {
	var labels []string
	for _, l := range strings.Split(s, ".") {
		var b strings.Builder
		for i := 0; i < len(l); i++ {
			b.WriteByte("ab"[l[i]&1])
		}
		if b.Len() > 0 {
			labels = append(labels, b.String())
		}
	}
	return strings.Join(labels, ".")
}

// checkFamiliesAgree asserts where the families must agree with the Go
// reference. For lists of plain names (no dots in front, no ports, no
// wildcards) and a host name that is neither an address nor localhost,
// every family but Node matches the name and its subdomains exactly like
// Go, and Node matches the name only. For lists of ".name" entries Go,
// wget and Node match the subdomains only, the others the name too.
func checkFamiliesAgree(t *testing.T, noProxy, rawHost string) {
	t.Helper()
	host := fuzzName(rawHost)
	if host == "" {
		return
	}
	var plain, dotted []string
	exact := false
	for _, e := range strings.Split(noProxy, ",") {
		if n := fuzzName(e); n != "" {
			plain = append(plain, n)
			dotted = append(dotted, "."+n)
			exact = exact || n == host
		}
	}
	u := "http://" + host + "/"
	decide := func(c Client, list []string) Decision {
		d, err := Decide(c, strings.Join(list, ","), u)
		if err != nil {
			t.Fatalf("Decide(%v, %q, %q): %v", c, list, u, err)
		}
		return d
	}
	goPlain := decide(Go, plain)
	for _, c := range []Client{Curl, Python, Urllib, Wget} {
		if d := decide(c, plain); d != goPlain {
			t.Fatalf("%v says %v for %q and %s, Go says %v", c, d, plain, u, goPlain)
		}
	}
	if d := decide(Node, plain); (d == Direct) != exact {
		t.Fatalf("node says %v for %q and %s; it must match exact names only", d, plain, u)
	}
	goDotted := decide(Go, dotted)
	for _, c := range []Client{Wget, Node} {
		if d := decide(c, dotted); d != goDotted {
			t.Fatalf("%v says %v for %q and %s, Go says %v", c, d, dotted, u, goDotted)
		}
	}
	for _, c := range []Client{Curl, Python, Urllib} {
		if d := decide(c, dotted); d != goPlain {
			t.Fatalf("%v says %v for %q and %s, and %v without the dots", c, d, dotted, u, goPlain)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, r := range decisionTable {
		f.Add(r.noProxy)
	}
	f.Add("a,,b, ,*.c:80,[::1]:8,10.0.0.0/33,http://x,10.0.0.")
	f.Fuzz(func(t *testing.T, noProxy string) {
		entries := Parse(noProxy)
		var want int
		for _, p := range strings.Split(noProxy, ",") {
			if strings.TrimSpace(p) != "" {
				want++
			}
		}
		if len(entries) != want {
			t.Fatalf("Parse(%q) has %d entries, want %d", noProxy, len(entries), want)
		}
		for _, e := range entries {
			if e.Text == "" || e.Text != strings.TrimSpace(e.Text) || strings.Contains(e.Text, ",") {
				t.Fatalf("Parse(%q): bad entry text %q", noProxy, e.Text)
			}
			if (e.Kind == KindInvalid) != (e.Problem != "") {
				t.Fatalf("Parse(%q): entry %+v: Problem must be set exactly for invalid entries", noProxy, e)
			}
			_, _, _ = entryIssue(e)
		}
	})
}

func FuzzMerge(f *testing.F) {
	f.Add("a,B, a ,,10.0.0.1/8", "b,10.0.0.0/8,kubernetes")
	f.Add("::ffff:10.0.0.1", "10.0.0.1")
	f.Add("", "kubernetes, 172.31.0.0/16")
	f.Fuzz(func(t *testing.T, noProxy, add string) {
		adds := strings.Split(add, ";")
		got := Merge(noProxy, adds)
		if again := Merge(got, nil); again != got {
			t.Fatalf("Merge is not idempotent: %q then %q", got, again)
		}
		if again := Merge(got, adds); again != got {
			t.Fatalf("merging the same additions twice changed %q to %q", got, again)
		}
		seen := map[string]bool{}
		for _, e := range strings.Split(got, ",") {
			if got == "" {
				break
			}
			if e == "" || e != strings.TrimSpace(e) {
				t.Fatalf("Merge(%q, %q) = %q has a blank or untrimmed entry", noProxy, adds, got)
			}
			if seen[mergeKey(e)] {
				t.Fatalf("Merge(%q, %q) = %q repeats %q", noProxy, adds, got, e)
			}
			seen[mergeKey(e)] = true
		}
		for _, a := range adds {
			for _, e := range strings.Split(a, ",") {
				if strings.TrimSpace(e) != "" && !seen[mergeKey(e)] {
					t.Fatalf("Merge(%q, %q) = %q lost %q", noProxy, adds, got, e)
				}
			}
		}
		// The user's entries come first, in their order.
		user := Merge(noProxy, nil)
		if !strings.HasPrefix(got, user) {
			t.Fatalf("Merge(%q, %q) = %q does not start with the user's list %q", noProxy, adds, got, user)
		}
	})
}

func FuzzLint(f *testing.F) {
	f.Add("http://u:p@proxy:3128", "https://proxy:3129", ".corp,*,*.x,a b,10.0.0.0/0", "172.31.0.0/16", "KubeVirt", "api.example.com")
	f.Add("", "", "kubernetes", "fd00::/112", "", "")
	f.Add("proxy:3128", "", "", "not-a-cidr", "Konvoy", "")
	f.Fuzz(func(t *testing.T, httpProxy, httpsProxy, noProxy, svc, platform, api string) {
		c := ClusterProxy{HTTPProxy: httpProxy, HTTPSProxy: httpsProxy, NoProxy: noProxy,
			ServiceCIDRs: []string{svc}, ClusterCIDRs: []string{svc}, Platform: platform, APIServerHost: api, APIServerPort: 6443}
		fs := Lint(c)
		if !c.hasProxy() && (len(fs) != 0 || Missing(c) != nil) {
			t.Fatalf("proxy-less cluster has findings %v", fs)
		}
		for _, f := range fs {
			if f.Code == "" || f.Reason == "" || f.Severity.rank() > 2 || (f.Severity != SeverityInfo && f.Severity.rank() == 2) {
				t.Fatalf("bad finding %+v", f)
			}
		}
		_ = FixNoProxy(c)
		for _, f := range LintClients(c, AllClients()) {
			if f.Code == "" || f.Reason == "" || f.Entry == "" {
				t.Fatalf("bad client finding %+v", f)
			}
		}
	})
}
