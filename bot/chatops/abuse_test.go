package chatops

import (
	"errors"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// Abuse suite (issue 9), Slack requests: every kind of bad request the
// issue lists, sent to ONE running server in a row, each answered 401/400,
// none reaching the handler or the response_url, each counted in
// hcpbot_slack_requests_rejected_total{reason} as read from the registry.
// TestRejections covers the same reasons one fresh server at a time (and a
// few more); this is the suite's single table with its figures.
func TestChaosSlackRequestAbuse(t *testing.T) {
	e := newEnv(t, nil, nil)
	now := time.Now()
	form := func(text string) []byte {
		return []byte(url.Values{"command": {"/hcp"}, "text": {text}, "user_id": {"U0ALICE"}, "team_id": {slackrec.TeamID},
			"channel_id": {e.channel}, "response_url": {e.rec.ResponseURL(e.channel)}}.Encode())
	}
	// Valid requests signed 4m30s ago (inside the 5-minute window) are
	// accepted once; their replays are the "replay" rows.
	inWindow := now.Add(-4*time.Minute - 30*time.Second)
	replayCmd := replayable(t, e.command("approve act-7f3k9q", inWindow))
	replayPress := replayable(t, e.press(blockkit.ActionApprove, "act-7f3k9q", inWindow))
	for what, req := range map[string]*http.Request{"command": replayCmd(), "button press": replayPress()} {
		if a := do(t, req); a.status != http.StatusOK {
			t.Fatalf("original %s signed 4m30s ago: status %d %q", what, a.status, a.body)
		}
	}
	const originals = 2
	e.rec.WaitFor(t, 10*time.Second, func(*slackrec.Recorder) bool {
		return e.h.called() == originals && len(e.rec.CallsTo(slackrec.MethodResponseURL)) == 1
	})
	postsBefore := len(e.rec.CallsTo(slackrec.MethodResponseURL))

	tests := []struct {
		name   string
		req    func() *http.Request
		status int
		reason string
	}{
		{"bad signature (wrong secret)", func() *http.Request {
			return signed(t, e.http.URL, CommandsPath, "not-the-signing-secret", form("status"), now)
		}, 401, reasonBadSignature},
		{"bad signature (body changed after signing)", func() *http.Request {
			req := signed(t, e.http.URL, CommandsPath, testSecret, form("status"), now)
			b := form("approve act-7f3k9q")
			req.Body, req.ContentLength = ioNop(b), int64(len(b))
			return req
		}, 401, reasonBadSignature},
		{"bad signature (button press, wrong secret)", func() *http.Request {
			req := replayPress()
			body := readAll(t, req)
			return signed(t, e.http.URL, ActionsPath, "not-the-signing-secret", body, now)
		}, 401, reasonBadSignature},
		{"missing timestamp header", func() *http.Request {
			req := e.command("status", now)
			req.Header.Del(headerTimestamp)
			return req
		}, 401, reasonMissingHeaders},
		{"missing signature header", func() *http.Request {
			req := e.command("status", now)
			req.Header.Del(headerSignature)
			return req
		}, 401, reasonMissingHeaders},
		{"missing both headers (button press)", func() *http.Request {
			req := e.press(blockkit.ActionApprove, "act-7f3k9q", now)
			req.Header.Del(headerTimestamp)
			req.Header.Del(headerSignature)
			return req
		}, 401, reasonMissingHeaders},
		{"timestamp 6 minutes old", func() *http.Request {
			return e.command("status", now.Add(-6*time.Minute))
		}, 401, reasonStaleTimestamp},
		{"timestamp 6 minutes old (button press)", func() *http.Request {
			return e.press(blockkit.ActionApprove, "act-7f3k9q", now.Add(-6*time.Minute))
		}, 401, reasonStaleTimestamp},
		{"replay of a command inside the 5-minute window", replayCmd, 401, reasonReplay},
		{"replay of a command, again", replayCmd, 401, reasonReplay},
		{"replay of a button press inside the 5-minute window", replayPress, 401, reasonReplay},
		{"oversized body", func() *http.Request {
			return signed(t, e.http.URL, CommandsPath, testSecret, form("status "+strings.Repeat("a", DefaultMaxBodyBytes)), now)
		}, 400, reasonTooLarge},
		{"oversized body, chunked", func() *http.Request {
			body := form("status " + strings.Repeat("a", 4*DefaultMaxBodyBytes))
			req := signed(t, e.http.URL, CommandsPath, testSecret, body, now)
			req.ContentLength = -1
			req.Body = ioNop(body)
			return req
		}, 400, reasonTooLarge},
		{"malformed payload JSON (truncated)", func() *http.Request {
			body := []byte(url.Values{"payload": {`{"type":"block_actions","actions":[`}}.Encode())
			return signed(t, e.http.URL, ActionsPath, testSecret, body, now)
		}, 400, reasonMalformed},
		{"malformed payload JSON (not an object)", func() *http.Request {
			body := []byte(url.Values{"payload": {`["block_actions"]`}}.Encode())
			return signed(t, e.http.URL, ActionsPath, testSecret, body, now)
		}, 400, reasonMalformed},
		{"malformed payload (not JSON at all)", func() *http.Request {
			body := []byte(url.Values{"payload": {"approve act-7f3k9q; rm -rf /"}}.Encode())
			return signed(t, e.http.URL, ActionsPath, testSecret, body, now)
		}, 400, reasonMalformed},
		{"unknown action id", func() *http.Request {
			return e.press("hcp_delete_cluster", "act-7f3k9q", now)
		}, 400, reasonUnknownAction},
		{"unknown action id (look-alike of hcp_approve)", func() *http.Request {
			return e.press("hcp_аpprove", "act-7f3k9q", now) // Cyrillic а
		}, 400, reasonUnknownAction},
		{"unknown action id (empty)", func() *http.Request {
			return e.press("", "act-7f3k9q", now)
		}, 400, reasonUnknownAction},
	}

	want := map[string]float64{}
	for _, tt := range tests {
		a := do(t, tt.req())
		if a.status != tt.status {
			t.Errorf("%s: status %d %q, want %d", tt.name, a.status, a.body, tt.status)
		}
		want[tt.reason]++
		if got := e.rejected(tt.reason); got != want[tt.reason] {
			t.Errorf("%s: rejected{reason=%q} = %v after it, want %v", tt.name, tt.reason, got, want[tt.reason])
		}
	}

	// Read the metric as Prometheus exposes it: every reason as expected,
	// nothing else rejected, nothing more accepted.
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byReason := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "hcpbot_slack_requests_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" {
					byReason[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	var total float64
	for _, r := range rejectReasons {
		if byReason[r] != want[r] {
			t.Errorf("metric hcpbot_slack_requests_rejected_total{reason=%q} = %v, want %v", r, byReason[r], want[r])
		}
		total += byReason[r]
	}
	if accepted := e.accepted("commands") + e.accepted("actions"); accepted != originals {
		t.Errorf("accepted = %v, want %d (the two originals)", accepted, originals)
	}
	// Side effects: the handler saw only the originals, and nothing more
	// was posted to a response_url. The sleep gives a wrongly started
	// background handler time to show itself; there is nothing to poll for.
	time.Sleep(50 * time.Millisecond)
	if n := e.h.called(); n != originals {
		t.Errorf("handler called %d times, want %d (the originals only)", n, originals)
	}
	posts := len(e.rec.CallsTo(slackrec.MethodResponseURL))
	if posts != postsBefore {
		t.Errorf("response_url posts went from %d to %d", postsBefore, posts)
	}
	figures := map[string]any{
		"requests_bad":         len(tests),
		"rejected_total":       total,
		"accepted_valid":       originals,
		"handler_calls_extra":  e.h.called() - originals,
		"response_posts_extra": posts - postsBefore,
	}
	for r, n := range want {
		figures["rejected_"+r] = n
	}
	chaosreport.Log(t, "abuse-slack-requests", figures)
}

func readAll(t *testing.T, req *http.Request) []byte {
	t.Helper()
	defer req.Body.Close()
	b, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Abuse suite (issue 9), command injection: cluster names, namespaces,
// ports and noProxy entries from chat that carry shell metacharacters,
// newlines, path_traversal, over-long names, Unicode confusables, or a
// "--add" with "*" or spaces, are refused with a usage error by Parse, and
// through the signed HTTP endpoint never reach the handler.
func TestChaosCommandInjection(t *testing.T) {
	long := strings.Repeat("a", 300)
	type tc struct{ class, in string }
	// class names double as figure names: inputs_<class>.
	var cases []tc
	add := func(class string, ins ...string) {
		for _, in := range ins {
			cases = append(cases, tc{class, in})
		}
	}
	add("shell_cluster",
		"status clusters/example;id",
		"status clusters/example&&reboot",
		"status clusters/example|nc",
		"status clusters/$(id)",
		"status clusters/${IFS}id",
		"status clusters/`id`",
		"status clusters/exa>mple",
		"status clusters/'example'",
		`status clusters/"example"`,
		"diagnose clusters/ex*mple",
		"diagnose clusters/example#",
		"fix noproxy clusters/exa\\mple",
		"status $(id):clusters/example",
	)
	add("shell_namespace",
		"status kube-system;id/example",
		"expose clusters/example sh;op/web",
		"expose clusters/example $(id)/web",
		"expose clusters/example shop/web;id",
		"silence clusters|x/example 1h",
	)
	add("newline_control",
		"status clusters/example\nid",
		"status clusters/exa\nmple",
		"diagnose clusters/example\r\nX-Injected: 1",
		"status clusters/example\x00",
		"status clusters/exam\x1b[2Jple",
		"expose clusters/example shop/web 80\n443;id",
		"fix noproxy clusters/example --add a.com\nb.com;id",
	)
	add("path_traversal",
		"status ../kube-system/example",
		"status clusters/../../etc/passwd",
		"status clusters/..",
		"status mgmt-1:../clusters/example",
		"expose clusters/example ../web",
		"expose clusters/example shop/../web",
		"approve ../../etc/passwd",
		"rollback act-../x",
		"fix noproxy clusters/example --add ../../etc/passwd",
	)
	add("name_300_chars",
		"status clusters/"+long,
		"status "+long+"/example",
		"status "+long+":clusters/example",
		"expose clusters/example "+long+"/web",
		"expose clusters/example shop/"+long,
		"fix noproxy clusters/example --add "+long+".com",
		"approve act-"+long,
	)
	add("unicode_confusable",
		"status clusters/exаmple",          // Cyrillic а
		"status сlusters/example",          // Cyrillic с
		"status clusters/ｅｘａｍｐｌｅ",          // fullwidth
		"status clusters／example",          // fullwidth solidus
		"status clusters/example\u200b",    // zero-width space
		"status clusters/\u202eelpmaxe",    // right-to-left override
		"status clusters/exam\u00adple",    // soft hyphen
		"ѕtatus clusters/example",          // Cyrillic ѕ
		"approve аct-7f3k9q",               // Cyrillic а
		"expose clusters/example shop/wеb", // Cyrillic е
		"fix noproxy clusters/example --add ехample.com",
		"fix noproxy clusters/example --add *.exаmple.com",
	)
	add("port",
		"expose clusters/example shop/web 80;id",
		"expose clusters/example shop/web 80$(id)",
		"expose clusters/example shop/web 0x50",
		"expose clusters/example shop/web 1e3",
		"expose clusters/example shop/web 80.0",
		"expose clusters/example shop/web 99999",
		"expose clusters/example shop/web -80",
		"expose clusters/example shop/web +443",
		"expose clusters/example shop/web ８０",
		"expose clusters/example shop/web ٨٠", // Arabic-Indic digits
		"expose clusters/example shop/web 80,,443",
		"expose clusters/example shop/web 80-90",
		"expose clusters/example shop/web "+portList(MaxPorts+1),
		"expose clusters/example shop/web nodeports "+portList(MaxPorts+1),
		"expose clusters/example shop/web nodeports 30001$(id)",
		"expose clusters/example shop/web nodeports 30001,-30002",
		"expose clusters/example shop/web nodeports ３０００１",
		"noproxy check clusters/example api.corp.example:80;id",
	)
	add("noproxy_add_star_space",
		"fix noproxy clusters/example --add *",
		"fix noproxy clusters/example --add=*",
		"fix noproxy clusters/example --add a.com,*",
		"fix noproxy clusters/example --add *,a.com",
		"fix noproxy clusters/example --add *.*",
		"fix noproxy clusters/example --add **.com",
		"fix noproxy clusters/example --add *com",
		"fix noproxy clusters/example --add a*.com",
		"fix noproxy clusters/example --add a.com, b.com",
		"fix noproxy clusters/example --add a.com b.com",
		"fix noproxy clusters/example --add 'a.com b.com'",
		"fix noproxy clusters/example --add \"a.com\"",
		"fix noproxy clusters/example --add a.com\tb.com",
		"fix noproxy clusters/example --add --add a.com",
		"fix noproxy clusters/example --add",
		"fix noproxy clusters/example --add a.com;curl${IFS}evil",
		"fix noproxy clusters/example --add $(curl evil)",
		"fix noproxy clusters/example --add `id`.com",
		"fix noproxy clusters/example --add a.com|b.com",
		"fix noproxy clusters/example --add 0.0.0.0/0;id",
		"fix noproxy clusters/example --add http://a.com",
	)

	e := newEnv(t, nil, nil)
	usage := 0
	for _, c := range cases {
		if got, err := Parse(c.in); err == nil {
			t.Errorf("%s: Parse(%q) = %#v, want a usage error", c.class, c.in, got)
			continue
		} else if ue := (*UsageError)(nil); !errors.As(err, &ue) {
			t.Errorf("%s: Parse(%q): %v, want a *UsageError", c.class, c.in, err)
			continue
		}
		// The same text as Slack would send it: answered with the
		// usage, privately, the handler never called.
		a := do(t, e.command(c.in, time.Now()))
		if a.status != http.StatusOK {
			t.Errorf("%s: %q: status %d %q", c.class, c.in, a.status, a.body)
			continue
		}
		r := a.reply(t)
		if r.ResponseType != "ephemeral" || !strings.Contains(r.Text, "Usage: `/hcp ") {
			t.Errorf("%s: %q: reply %+v is not a private usage error", c.class, c.in, r)
			continue
		}
		usage++
	}
	counted := 0.0
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "hcpbot_chatops_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "outcome" && lp.GetValue() == outcomeUsageError {
					counted += m.GetCounter().GetValue()
				}
			}
		}
	}
	if e.h.called() != 0 {
		t.Errorf("handler called %d times", e.h.called())
	}
	if counted != float64(len(cases)) {
		t.Errorf("usage errors counted %v, want %d", counted, len(cases))
	}
	if n := testutil.ToFloat64(e.srv.m.accepted.WithLabelValues("commands")); n != float64(len(cases)) {
		t.Errorf("accepted commands = %v, want %d (authentic requests, refused by the grammar)", n, len(cases))
	}
	classes := map[string]int{}
	for _, c := range cases {
		classes[c.class]++
	}
	figures := map[string]any{"inputs": len(cases), "usage_errors": usage, "handler_calls": e.h.called()}
	for k, n := range classes {
		figures["inputs_"+k] = n
	}
	chaosreport.Log(t, "abuse-command-injection", figures)
}

// Nothing from chat reaches a shell: no production package of the module
// imports os/exec (the test control plane under internal/controlplane,
// which builds and runs kube-apiserver, and natstest, which builds
// nats-server for the deploy-as-shipped test, are test tooling; hack/hops,
// which runs `go list` to follow a message through the code, is a
// developer's measuring tool, never built into hcpbot).
func TestChaosNoShell(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not at %s: %v", root, err)
	}
	allowed := map[string]bool{"internal/controlplane": true, "internal/testenv/natstest": true, "hack/hops": true}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || allowed[filepath.ToSlash(rel)] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "os/exec" {
				t.Errorf("%s imports os/exec", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("only %d Go files found under %s", files, root)
	}
}

// portList is "1,2,...,n".
func portList(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = strconv.Itoa(i + 1)
	}
	return strings.Join(ps, ",")
}
