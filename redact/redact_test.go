package redact

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://user:pass@proxy.corp:3128", "http://***@proxy.corp:3128"},
		{"http://user:pass@proxy.corp:3128/", "http://***@proxy.corp:3128/"},
		{"https://token@proxy.corp", "https://***@proxy.corp"},
		{"http://proxy.corp:3128", "http://proxy.corp:3128"},
		{"proxy.corp:3128", "proxy.corp:3128"},
		{"user:pass@proxy.corp:3128", "***@proxy.corp:3128"},
		{"//user:pass@proxy", "//***@proxy"},
		{"http://us%40er:p%3Ass@proxy", "http://***@proxy"},
		// Raw, unescaped specials in the password: net/url rejects these,
		// the password must still disappear.
		{"http://user:pa/ss@proxy:3128", "http://***@proxy:3128"},
		{"http://user:pa?ss@proxy:3128", "http://***@proxy:3128"},
		{"http://user:pa#ss@proxy:3128", "http://***@proxy:3128"},
		{"http://user:p@ss@proxy:3128", "http://***@proxy:3128"},
		{"http://user:p@ss/x@proxy:3128", "http://***@proxy:3128"},
		{"http://user:pass@[::1]:3128", "http://***@[::1]:3128"},
		// No userinfo: paths with '@' are left alone unless a ':' could be
		// a password separator.
		{"https://registry.npmjs.org/@scope/pkg", "https://registry.npmjs.org/@scope/pkg"},
		{"", ""},
		// "%zz" is no scheme, so all before the '@' is userinfo.
		{"%zz://::@", "***@"},
		// A host holding "://" after a scheme-less userinfo (found by
		// the fuzzer).
		{"0:1@://", "***@://"},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// NATS server URLs (package bus logs them): a token sits where a user name
// would, and a list entry may hold several comma-separated URLs.
func TestURLs(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{[]string{"nats://user:pass@nats.corp:4222"}, []string{"nats://***@nats.corp:4222"}},
		{[]string{"nats://TOKEN@nats.corp:4222"}, []string{"nats://***@nats.corp:4222"}},
		{[]string{"tls://nats.corp:4222"}, []string{"tls://nats.corp:4222"}},
		{[]string{"u:p@10.0.0.1:4222"}, []string{"***@10.0.0.1:4222"}},
		{[]string{"10.0.0.1:4222"}, []string{"10.0.0.1:4222"}},
		{[]string{"nats://a b:%zz@h"}, []string{"nats://***@h"}},
		{[]string{""}, []string{""}},
		{nil, []string{}},
		{[]string{"nats://a:4222, nats://t@b:4222", "tls://u:p@c"}, []string{"nats://a:4222", "nats://***@b:4222", "tls://***@c"}},
		// A comma in a raw password: the piece before it must not show.
		{[]string{"nats://u:pa,ss@h:4222"}, []string{"nats://***@h:4222"}},
		{[]string{"nats://a:4222,nats://u:p,a,ss@h"}, []string{"nats://a:4222", "nats://***@h"}},
		// A comma in the user name before a password starting with "//"
		// (found by the fuzzer in CI): "://#@0" has no scheme, so it is
		// the rest of the URL before it.
		{[]string{"nats://a:4222,0://,://#@0,tls://b:4222"}, []string{"nats://***@0", "tls://b:4222"}},
		{[]string{"nats://a:4222,nats://,://pw@h"}, []string{"nats://a:4222", "nats://***@h"}},
		// A server URL has no path: an '@' after '/' still ends userinfo.
		{[]string{"nats://u:p/w@h"}, []string{"nats://***@h"}},
		{[]string{"nats://x,http://#@0"}, []string{"nats://x", "http://***@0"}},
		// A scheme-less URL whose password holds "://": "u:a" is no
		// scheme, so the password's "a" must not show (attack on 5c7964c).
		{[]string{"u:a://b@h:4222"}, []string{"***@h:4222"}},
		{[]string{"nats://a:4222,nats://b:4222"}, []string{"nats://a:4222", "nats://b:4222"}},
	}
	for _, tt := range tests {
		if got := URLs(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("URLs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRedactText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"no secrets here", "no secrets here"},
		{"HTTPS_PROXY=http://u:p@proxy:3128 NO_PROXY=.corp", "HTTPS_PROXY=http://***@proxy:3128 NO_PROXY=.corp"},
		{"proxy http://alice:s3cret@10.0.0.1:8080/ failed; retry http://bob:pw@p2", "proxy http://***@10.0.0.1:8080/ failed; retry http://***@p2"},
		{"HTTP_PROXY=alice:s3cret@proxy:3128", "HTTP_PROXY=***@proxy:3128"},
		{`{"httpProxy":"http://u:p@h:1","noProxy":"a,b"}`, `{"httpProxy":"http://***@h:1","noProxy":"a,b"}`},
		{"mail admin@example.com for help", "mail admin@example.com for help"},
		{"see https://host/path@v1 and http://h:80/", "see https://host/path@v1 and http://h:80/"},
		{"two http://a:1@x,http://b:2@y", "two http://***@y"},
		{"first user:pw@h then http://u:p@h2", "first ***@h then http://***@h2"},
		{"trailing http://", "trailing http://"},
		{"@@@ :@ ://@", "@@@ ***@ ://***@"},
		// A scheme-less password holding "://" whose rest has no ':'
		// (found by the fuzzer in CI).
		{"0 0:1://#@0  ", "0 ***@0  "},
		{"0 0:@://#@0  ", "0 ***@0  "},
		{"a u:p@h@x b", "a ***@x b"},
		// A scheme-less user:pass@host whose password holds "://" (attack
		// on 5c7964c): "u:a" is no scheme, the password's "a" must not show.
		{"x u:a://b@h y", "x ***@h y"},
		{"x HTTP_PROXY=u:a://b@h y", "x HTTP_PROXY=***@h y"},
		{"x [http://u:p@h] y", "x [http://***@h] y"},
		{"{HTTPProxy:http://u:p@h}", "***@h}"},
		{"servers nats://a:4222,nats://b:4222 up", "servers nats://a:4222,nats://b:4222 up"},
	}
	for _, tt := range tests {
		if got := RedactText(tt.in); got != tt.want {
			t.Errorf("RedactText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// uniqueRune returns a rune of pass that occurs nowhere in others, so that
// finding it in the output proves the password (or a piece of it) leaked.
func uniqueRune(pass string, others ...string) (rune, bool) {
	all := strings.Join(others, "\x00") + Mask + "@:/"
	for _, r := range pass {
		if !strings.ContainsRune(all, r) {
			return r, true
		}
	}
	return 0, false
}

func FuzzRedactNoPassword(f *testing.F) {
	f.Add("http", "alice", "s3cr3t!", "proxy.corp:3128", "log: ", " end")
	f.Add("https", "u", "p/a?s#s@w", "[::1]:8443", "HTTPS_PROXY=", "")
	f.Add("", "bob", "hunter2", "10.0.0.1:3128", "x=", ",y")
	f.Add("socks5", "", "tok", "h", "", "")
	f.Add("", "u", "a://b", "h", "x ", " y")
	f.Fuzz(func(t *testing.T, scheme, user, pass, host, prefix, suffix string) {
		for _, s := range []string{scheme, user, pass, host, prefix, suffix} {
			if !utf8.ValidString(s) {
				t.Skip()
			}
		}
		// Words end at whitespace in free text, so a password with blanks
		// cannot be told apart from the next word; a user name containing
		// '@' or ':' makes the password boundary ambiguous.
		if pass == "" || strings.ContainsAny(pass, " \t\r\n\v\f") || strings.ContainsAny(user, "@: \t\r\n\v\f") ||
			strings.ContainsAny(host, "@ \t\r\n\v\f") || strings.ContainsAny(scheme, " \t\r\n\v\f") {
			t.Skip()
		}
		// Without a scheme, a password starting with "//" makes
		// "user://..." — a URL whose scheme is the user name, not userinfo
		// (found by the fuzzer: "0" + ":" + "//#0" + "@0").
		if scheme == "" && strings.HasPrefix(pass, "//") {
			t.Skip()
		}
		r, ok := uniqueRune(pass, scheme, user, host, prefix, suffix)
		if !ok {
			t.Skip()
		}
		raw := user + ":" + pass + "@" + host
		if scheme != "" {
			raw = scheme + "://" + raw
		}
		if got := RedactURL(raw); strings.ContainsRune(got, r) {
			t.Fatalf("RedactURL(%q) = %q leaks the password", raw, got)
		}
		// A list of one server URL: nothing before it to join.
		if i := strings.Index(pass, ","); i < 0 || !strings.Contains(pass[i:], "://") {
			if got := URLs([]string{raw}); strings.ContainsRune(strings.Join(got, " "), r) {
				t.Fatalf("URLs(%q) = %q leaks the password", raw, got)
			}
		}
		// A NATS URL list: between other servers, a comma in the
		// password must not leave its first piece outside the mask (a
		// comma followed by "://" looks like the next URL: ambiguous).
		if i := strings.Index(pass, ","); i < 0 || !strings.Contains(pass[i:], "://") {
			const before, after = "nats://a:4222,", ",tls://b:4222"
			list := []string{before + raw + after}
			if lr, ok := uniqueRune(pass, scheme, user, host, before, after); ok {
				if got := URLs(list); strings.ContainsRune(strings.Join(got, " "), lr) {
					t.Fatalf("URLs(%q) = %q leaks the password", list, got)
				}
			}
		}
		// Free text: the URL must stand as its own word. Without a scheme,
		// a user:pass@host word is found by its delimiters (tokenStart:
		// quotes, '=', '<', '>', parentheses, as in JSON or key=value
		// logs), so a password containing one of them is as ambiguous
		// there as one with a blank; RedactURL above still has to hide it.
		if (strings.ContainsAny(prefix+suffix, " \t") || (prefix == "" && suffix == "")) &&
			!(scheme == "" && strings.ContainsAny(pass, "\"'`=<>()")) {
			text := prefix + " " + raw + " " + suffix
			if got := RedactText(text); strings.ContainsRune(got, r) {
				t.Fatalf("RedactText(%q) = %q leaks the password", text, got)
			}
		}
		// The escaped form net/url produces must not survive either.
		if scheme != "" {
			u := &url.URL{Scheme: "http", User: url.UserPassword(user, pass), Host: "proxy:3128"}
			esc := u.String()
			enc := strings.TrimPrefix(u.User.String(), url.User(user).String()+":")
			if er, ok := uniqueRune(enc, "http", url.User(user).String(), "proxy:3128"); ok {
				if got := RedactText("x " + esc + " y"); strings.ContainsRune(got, er) {
					t.Fatalf("RedactText(%q) = %q leaks the escaped password", esc, got)
				}
			}
		}
	})
}
