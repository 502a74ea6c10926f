package noproxy

import (
	"bufio"
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestJavaNonProxyHosts(t *testing.T) {
	tests := []struct {
		noProxy, want string
		notes         []string // entries with a note
	}{
		{"", "", nil},
		{"example.com", "example.com|*.example.com", nil},
		{".svc, *.corp.example", "*.svc|*.corp.example", nil},
		{"example.com,.example.com,EXAMPLE.com", "example.com|*.example.com", nil},
		{"10.0.0.0/8,172.31.0.0/16,192.168.1.0/24,10.1.2.3/32", "10.*|172.31.*|192.168.1.*|10.1.2.3", nil},
		{"10.0.0.0/18,fd00::/112,10.0.0.0/0", "", []string{"10.0.0.0/18", "fd00::/112", "10.0.0.0/0"}},
		{"10.0.0.1,2001:DB8:0::1,::ffff:10.0.0.2", "10.0.0.1|[2001:db8::1]|10.0.0.2", nil},
		{"api.example:6443,10.0.0.1:80", "api.example|*.api.example|10.0.0.1", []string{"api.example:6443", "10.0.0.1:80"}},
		{"*", "*", nil},
		{"http://x,a b", "", []string{"http://x", "a b"}},
	}
	for _, tt := range tests {
		got := JavaNonProxyHosts(tt.noProxy)
		var notes []string
		for _, n := range got.Notes {
			notes = append(notes, n.Entry)
			if n.Reason == "" || n.Dropped != (n.Translated == "") {
				t.Errorf("%q: bad note %+v", tt.noProxy, n)
			}
		}
		if got.NonProxyHosts != tt.want || !reflect.DeepEqual(notes, tt.notes) {
			t.Errorf("JavaNonProxyHosts(%q) = %q, notes %q; want %q, %q", tt.noProxy, got.NonProxyHosts, notes, tt.want, tt.notes)
		}
	}
}

// javaCase generates a list of entries Java can express and a host made of
// letters or a canonical IPv4 address, where the translation must mean
// exactly what Go reads.
func javaCase(r *rand.Rand) (noProxy, host string) {
	names := []string{"example.com", "corp.example", "svc", "a.svc", "com"}
	ips := []string{"10.0.0.1", "10.1.2.3", "172.31.0.1", "192.168.1.5", "10.0.0.10"}
	var entries []string
	for i, n := 0, 1+r.IntN(3); i < n; i++ {
		switch r.IntN(6) {
		case 0:
			entries = append(entries, names[r.IntN(len(names))])
		case 1:
			entries = append(entries, "."+names[r.IntN(len(names))])
		case 2:
			entries = append(entries, "*."+names[r.IntN(len(names))])
		case 3:
			entries = append(entries, ips[r.IntN(len(ips))])
		default:
			entries = append(entries, []string{"10.0.0.0/8", "10.1.0.0/16", "192.168.1.0/24", "172.31.0.1/32", "10.0.0.1/32"}[r.IntN(5)])
		}
	}
	hosts := append([]string{"www.example.com", "example.com", "notexample.com", "api.corp.example", "kubernetes.default.svc",
		"x.a.svc", "svc", "com", "EXAMPLE.COM"}, ips...)
	return strings.Join(entries, ","), hosts[r.IntN(len(hosts))]
}

func TestJavaTranslationMeansWhatGoReads(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 9))
	for i := 0; i < 5000; i++ {
		np, host := javaCase(r)
		tr := JavaNonProxyHosts(np)
		if len(tr.Notes) > 0 {
			t.Fatalf("%q: unexpected notes %v", np, tr.Notes)
		}
		d, err := Decide(Go, np, "http://"+host+"/")
		if err != nil {
			t.Fatal(err)
		}
		if javaMatch(tr.NonProxyHosts, host) != (d == Direct) {
			t.Fatalf("no_proxy %q → http.nonProxyHosts %q: Java bypasses %s = %v, Go says %v", np, tr.NonProxyHosts, host, javaMatch(tr.NonProxyHosts, host), d)
		}
	}
}

const javaProgram = `
import java.io.*;
import java.net.*;
import java.util.*;

public class Select {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
    String line;
    while ((line = in.readLine()) != null) {
      String[] f = line.split("\t", 2);
      System.setProperty("http.nonProxyHosts", f[0]);
      List<Proxy> l = ProxySelector.getDefault().select(new URI(f[1]));
      System.out.println(l.get(0).type() == Proxy.Type.DIRECT ? "direct" : "proxy");
    }
  }
}
`

// TestJavaTranslationAgainstRealJava compiles a program that asks the
// JDK's default ProxySelector (no connection is made: select only picks a
// proxy, which points at 127.0.0.1 anyway) and checks the translations.
func TestJavaTranslationAgainstRealJava(t *testing.T) {
	javac, err := exec.LookPath("javac")
	if err != nil {
		missingClient(t, "javac not installed: Java translation not confirmed")
	}
	java, err := exec.LookPath("java")
	if err != nil {
		missingClient(t, "java not installed: Java translation not confirmed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "Select.java")
	if err := os.WriteFile(src, []byte(javaProgram), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, javac, "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v: %s", err, out)
	}
	r := rand.New(rand.NewPCG(4, 4))
	type jcase struct{ noProxy, nonProxyHosts, url, want string }
	var cases []jcase
	for i := 0; i < 400; i++ {
		np, host := javaCase(r)
		tr := JavaNonProxyHosts(np)
		scheme := []string{"http", "https"}[r.IntN(2)]
		want := "proxy"
		if javaMatch(tr.NonProxyHosts, host) {
			want = "direct"
		}
		cases = append(cases, jcase{np, tr.NonProxyHosts, scheme + "://" + host + "/", want})
	}
	// Java's own rules: brackets and text for IPv6, loopback always direct.
	for _, c := range []jcase{
		{"2001:db8::1", "[2001:db8::1]", "http://[2001:db8::1]/", "direct"},
		{"2001:db8::1", "[2001:db8::1]", "http://[2001:db8:0::1]/", "proxy"},
		{"", "example.com", "http://localhost/", "direct"},
		{"", "example.com", "http://127.0.0.1/", "direct"},
		{"", "*.corp", "http://API.CORP/", "direct"},
	} {
		cases = append(cases, c)
	}
	var in bytes.Buffer
	for _, c := range cases {
		in.WriteString(c.nonProxyHosts + "\t" + c.url + "\n")
	}
	cmd := exec.CommandContext(ctx, java, "-Dhttp.proxyHost=127.0.0.1", "-Dhttp.proxyPort=9",
		"-Dhttps.proxyHost=127.0.0.1", "-Dhttps.proxyPort=9", "-cp", dir, "Select")
	cmd.Env = append(cleanEnv(), "JAVA_TOOL_OPTIONS=")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java: %v: %s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	i := 0
	for ; sc.Scan() && i < len(cases); i++ {
		if got := sc.Text(); got != cases[i].want {
			t.Errorf("no_proxy %q → http.nonProxyHosts %q: Java says %s for %s, want %s", cases[i].noProxy, cases[i].nonProxyHosts, got, cases[i].url, cases[i].want)
		}
	}
	if i != len(cases) {
		t.Fatalf("java answered %d of %d cases: %s", i, len(cases), out)
	}
}
