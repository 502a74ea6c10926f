package chatops

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func ref(mgmt, ns, name string) ClusterRef { return ClusterRef{Mgmt: mgmt, Namespace: ns, Name: name} }
func refp(mgmt, ns, name string) *ClusterRef {
	c := ref(mgmt, ns, name)
	return &c
}

var example = ref("", "clusters", "example")

func TestParseValid(t *testing.T) {
	tests := []struct {
		in   string
		want Command
		str  string // canonical String(); "" means same as in
	}{
		{"", ShowHelp{}, "help"},
		{"   \t\n ", ShowHelp{}, "help"},
		{"help", ShowHelp{}, ""},
		{"help fix", ShowHelp{Topic: "fix"}, ""},
		{"help fix noproxy", ShowHelp{Topic: "fix"}, "help fix"},
		{"HELP Status", ShowHelp{Topic: "status"}, "help status"},
		{"status", Status{}, ""},
		{"status clusters/example", Status{Cluster: &example}, ""},
		{"status mgmt-1:clusters/example", Status{Cluster: refp("mgmt-1", "clusters", "example")}, ""},
		{"status clusters/my.cluster-1", Status{Cluster: refp("", "clusters", "my.cluster-1")}, ""},
		{"Status  clusters/example ", Status{Cluster: &example}, "status clusters/example"},
		{"status\u00a0clusters/example", Status{Cluster: &example}, "status clusters/example"}, // Slack's NBSP
		{"incidents", Incidents{}, ""},
		{"diagnose clusters/example", Diagnose{Cluster: example}, ""},
		{"fix noproxy clusters/example", FixNoProxy{Cluster: example}, ""},
		{"fix NoProxy clusters/example", FixNoProxy{Cluster: example}, "fix noproxy clusters/example"},
		{"fix noproxy clusters/example --add kubernetes,172.31.0.0/16,.corp.example,*.svc.example,10.0.0.1:6443,[fd00::1]:443,fd00::/8,API.corp.example:8443",
			FixNoProxy{Cluster: example, Add: []string{"kubernetes", "172.31.0.0/16", ".corp.example", "*.svc.example", "10.0.0.1:6443", "[fd00::1]:443", "fd00::/8", "api.corp.example:8443"}},
			"fix noproxy clusters/example --add kubernetes,172.31.0.0/16,.corp.example,*.svc.example,10.0.0.1:6443,[fd00::1]:443,fd00::/8,api.corp.example:8443"},
		{"fix noproxy clusters/example --add=kubernetes,kubernetes,FD00:0::1",
			FixNoProxy{Cluster: example, Add: []string{"kubernetes", "fd00::1"}}, "fix noproxy clusters/example --add kubernetes,fd00::1"},
		{"expose clusters/example default/web", Expose{Cluster: example, Namespace: "default", Service: "web"}, ""},
		{"expose mgmt-1:clusters/example shop/frontend 80,443", Expose{Cluster: ref("mgmt-1", "clusters", "example"), Namespace: "shop", Service: "frontend", Ports: []int32{80, 443}}, ""},
		{"expose clusters/example shop/frontend 80 443,80 8080", Expose{Cluster: example, Namespace: "shop", Service: "frontend", Ports: []int32{80, 443, 8080}}, "expose clusters/example shop/frontend 80,443,8080"},
		{"expose clusters/example shop/frontend 1,65535", Expose{Cluster: example, Namespace: "shop", Service: "frontend", Ports: []int32{1, 65535}}, ""},
		// Seed 004: the runbook's node ports, for all ports or paired with
		// the listed ones (fewer node ports leave the rest allocated).
		{"expose clusters/example petclinic/petclinic nodeports 30001,30002,30003", Expose{Cluster: example, Namespace: "petclinic", Service: "petclinic", NodePorts: []int32{30001, 30002, 30003}}, ""},
		{"expose clusters/example petclinic/petclinic 8080,8443 NodePorts 30001", Expose{Cluster: example, Namespace: "petclinic", Service: "petclinic", Ports: []int32{8080, 8443}, NodePorts: []int32{30001}},
			"expose clusters/example petclinic/petclinic 8080,8443 nodeports 30001"},
		{"expose clusters/example petclinic/petclinic 8080 8443 nodeports 30001 30002", Expose{Cluster: example, Namespace: "petclinic", Service: "petclinic", Ports: []int32{8080, 8443}, NodePorts: []int32{30001, 30002}},
			"expose clusters/example petclinic/petclinic 8080,8443 nodeports 30001,30002"},
		{"rollback act-7f3k9q", Rollback{ActionID: "act-7f3k9q"}, ""},
		{"approve act-7f3k9q", Approve{ActionID: "act-7f3k9q"}, ""},
		{"reject act-7f3k9q", Reject{ActionID: "act-7f3k9q"}, ""},
		{"reject act-7f3k9q  not during\tthe freeze ", Reject{ActionID: "act-7f3k9q", Reason: "not during the freeze"}, "reject act-7f3k9q not during the freeze"},
		{"reject act-7f3k9q bad\x1b[31m \u202eidea\u200b", Reject{ActionID: "act-7f3k9q", Reason: "bad[31m idea"}, "reject act-7f3k9q bad[31m idea"},
		{"reject act-7f3k9q $(id) `x` ;rm -rf / <!channel>", Reject{ActionID: "act-7f3k9q", Reason: "$(id) `x` ;rm -rf / <!channel>"}, ""},
		{"silence clusters/example 2h", Silence{Cluster: &example, Duration: 2 * time.Hour}, "silence clusters/example 2h0m0s"},
		{"silence inc-0a1b2c 1d maintenance window", Silence{IncidentID: "inc-0a1b2c", Duration: 24 * time.Hour, Reason: "maintenance window"}, ""},
		{"silence inc-0a1b2c 1d12h", Silence{IncidentID: "inc-0a1b2c", Duration: 36 * time.Hour}, "silence inc-0a1b2c 36h0m0s"},
		{"silence inc-0a1b2c 30d", Silence{IncidentID: "inc-0a1b2c", Duration: 30 * 24 * time.Hour}, ""},
		{"silence inc-0a1b2c 1m", Silence{IncidentID: "inc-0a1b2c", Duration: time.Minute}, "silence inc-0a1b2c 1m0s"},
		{"silence mgmt-1:clusters/example 90m", Silence{Cluster: refp("mgmt-1", "clusters", "example"), Duration: 90 * time.Minute}, "silence mgmt-1:clusters/example 1h30m0s"},
		{"audit", Audit{}, ""},
		{"audit 20", Audit{N: 20}, ""},
		{"audit 0020", Audit{N: 20}, "audit 20"},
		{"audit 1000", Audit{N: 1000}, ""},
		{"audit verify", AuditVerify{}, ""},
		{"Audit  VERIFY ", AuditVerify{}, "audit verify"},
		{"digest now", DigestNow{}, ""},
		{"whoami", Whoami{}, ""},
		{" WhoAmI ", Whoami{}, "whoami"},
		{"help whoami", ShowHelp{Topic: "whoami"}, ""},
		{"noproxy check clusters/example api.corp.example", NoProxyCheck{Cluster: example, Host: "api.corp.example"}, ""},
		{"noproxy check clusters/example API.corp.example:443", NoProxyCheck{Cluster: example, Host: "api.corp.example", Port: 443}, "noproxy check clusters/example api.corp.example:443"},
		{"noproxy check clusters/example 172.31.0.1:443", NoProxyCheck{Cluster: example, Host: "172.31.0.1", Port: 443}, ""},
		{"noproxy check clusters/example [fd00::1]:6443", NoProxyCheck{Cluster: example, Host: "fd00::1", Port: 6443}, ""},
		{"noproxy check clusters/example fd00::1", NoProxyCheck{Cluster: example, Host: "fd00::1"}, ""},
		{"noproxy check clusters/example [fd00::1]", NoProxyCheck{Cluster: example, Host: "fd00::1"}, "noproxy check clusters/example fd00::1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			str := tt.str
			if str == "" {
				str = tt.in
			}
			if got.String() != str {
				t.Errorf("String() = %q, want %q", got.String(), str)
			}
			again, err := Parse(got.String())
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("round trip: Parse(%q) = %#v, %v", got.String(), again, err)
			}
			if got.Name() == "" || Usage(got.Name()) == "" {
				t.Errorf("Name() = %q has no usage", got.Name())
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		in      string
		command string // UsageError.Command
		hint    string // substring of the hint
	}{
		{"frobnicate", "", "unknown command"},
		{"ѕtatus", "", "unknown command"},       // Cyrillic ѕ
		{"ſtatus", "", "unknown command"},       // long s folds to s in Unicode
		{"\u212Aubectl", "", "unknown command"}, // Kelvin sign
		{"status;id", "", "unknown command"},
		{"/hcp status", "", "unknown command"}, // Slack strips the command
		{"\xff\xfe", "", "UTF-8"},
		{strings.Repeat("a", 10000), "", "longer than"},
		{"status " + strings.Repeat("x", 10000), "", "longer than"},
		{"help frobnicate", "help", "unknown command"},
		{"help status extra", "help", "too many"},
		{"status clusters", "status", "<namespace>/<name>"},
		{"status clusters/example;rm -rf /", "status", "too many"},
		{"status clusters/example;rm", "status", "DNS-1123 subdomain"},
		{"status clusters/$(id)", "status", "DNS-1123 subdomain"},
		{"status clusters/`id`", "status", "DNS-1123 subdomain"},
		{"status clusters/exаmple", "status", "DNS-1123 subdomain"}, // Cyrillic а
		{"status clusters／example", "status", "<namespace>/<name>"}, // fullwidth solidus
		{"status Clusters/example", "status", "DNS-1123 label"},
		{"status clusters/Example", "status", "DNS-1123 subdomain"},
		{"status -n/example", "status", "DNS-1123 label"},
		{"status clusters/", "status", "<namespace>/<name>"},
		{"status /example", "status", "<namespace>/<name>"},
		{"status clusters/a/b", "status", "DNS-1123 subdomain"},
		{"status mgmt_1:clusters/example", "status", "management cluster"},
		{"status :clusters/example", "status", "management cluster"},
		{"status " + strings.Repeat("a", 64) + "/example", "status", "DNS-1123 label"},
		{"status clusters/example\nrm -rf /", "status", "too many"},
		{"status clusters/example\x00", "status", "DNS-1123 subdomain"},
		{"incidents now", "incidents", "too many"},
		{"diagnose", "diagnose", "missing"},
		{"diagnose clusters/example clusters/other", "diagnose", "too many"},
		{"fix", "fix noproxy", "did you mean"},
		{"fix proxy clusters/example", "fix noproxy", "did you mean"},
		{"fix noproxy", "fix noproxy", "missing"},
		{"fix noproxy clusters/example --add", "fix noproxy", "--add needs"},
		{"fix noproxy clusters/example --add a, b", "fix noproxy", "too many"},
		{"fix noproxy clusters/example --add a,,b", "fix noproxy", "empty noProxy entry"},
		{"fix noproxy clusters/example --del a", "fix noproxy", "unexpected"},
		{"fix noproxy clusters/example --add *", "fix noproxy", "every host"},
		{"fix noproxy clusters/example --add $(id)", "fix noproxy", "not a hostname"},
		{"fix noproxy clusters/example --add a;b", "fix noproxy", "not a hostname"},
		{"fix noproxy clusters/example --add 10.0.0.1/8", "fix noproxy", "did you mean 10.0.0.0/8"},
		{"fix noproxy clusters/example --add " + strings.Repeat("a,", 33) + "b", "fix noproxy", "at most 32"},
		{"expose clusters/example", "expose", "missing"},
		{"expose clusters/example web", "expose", "<namespace>/<service>"},
		{"expose clusters/example shop/1web", "expose", "DNS-1035"},
		{"expose clusters/example shop/web 0", "expose", "between 1 and 65535"},
		{"expose clusters/example shop/web 65536", "expose", "between 1 and 65535"},
		{"expose clusters/example shop/web +80", "expose", "between 1 and 65535"},
		{"expose clusters/example shop/web 80,", "expose", "between 1 and 65535"},
		{"expose clusters/example shop/web -1", "expose", "between 1 and 65535"},
		{"expose clusters/example shop/web ８０", "expose", "between 1 and 65535"}, // fullwidth digits
		{"expose clusters/example shop/web nodeports", "expose", "nodeports needs"},
		{"expose clusters/example shop/web 80 nodeports", "expose", "nodeports needs"},
		{"expose clusters/example shop/web nodeports 30001,30001", "expose", "listed twice"},
		{"expose clusters/example shop/web nodeports 30001,0", "expose", "node port \"0\""},
		{"expose clusters/example shop/web nodeports 70000", "expose", "between 1 and 65535"},
		{"expose clusters/example shop/web nodeports 30001 nodeports 30002", "expose", "node port \"nodeports\""},
		{"expose clusters/example shop/web 80 nodeports 30001,30002", "expose", "2 node ports for 1 ports"},
		{"expose clusters/example shop/web 80,80 nodeports 30001", "expose", "listed twice"},
		{"expose clusters/example shop/web nodeports " + strings.Repeat("30001,", 32) + "30001", "expose", "listed twice"},
		{"expose clusters/example shop/web nodeports 30001;id", "expose", "between 1 and 65535"},
		{"approve", "approve", "missing"},
		{"approve act-1", "approve", "not an id"},
		{"approve ACT-7f3k9q", "approve", "not an id"},
		{"approve act-7f3k9q;id", "approve", "not an id"},
		{"approve act-7f3k9q extra", "approve", "too many"},
		{"approve ../../etc/passwd", "approve", "not an id"},
		{"rollback toolongprefix-abcd", "rollback", "not an id"},
		{"reject act-7f3k9q " + strings.Repeat("x", 301), "reject", "reason longer"},
		{"silence clusters/example", "silence", "missing"},
		{"silence clusters/example 31d", "silence", "between"},
		{"silence clusters/example 30s", "silence", "between"},
		{"silence clusters/example -1h", "silence", "between"},
		{"silence clusters/example 1d-1h", "silence", "not like"},
		{"silence clusters/example 9999999999999999999d", "silence", "not like"},
		{"silence clusters/example forever", "silence", "not like"},
		{"silence clusters/example 1w", "silence", "not like"},
		{"silence example 1h", "silence", "neither a cluster"},
		{"audit 0", "audit", "between 1 and 1000"},
		{"audit 1001", "audit", "between 1 and 1000"},
		{"audit -5", "audit", "between 1 and 1000"},
		{"audit 5 6", "audit", "too many"},
		{"audit verify now", "audit", "too many"},
		{"audit verify 5", "audit", "too many"},
		{"audit verfy", "audit", "or verify"},
		{"audit vеrify", "audit", "or verify"}, // Cyrillic е
		{"digest", "digest now", "did you mean"},
		{"whoami U0ALICE123", "whoami", "too many"},
		{"whoami <@U0ALICE123>", "whoami", "too many"},
		{"whoami mgmt-1", "whoami", "too many"},
		{"who am i", "", "unknown command"},
		{"whoamі", "", "unknown command"}, // Cyrillic і
		{"digest later", "digest now", "did you mean"},
		{"noproxy check clusters/example", "noproxy check", "missing"},
		{"noproxy check clusters/example http://api.corp.example", "noproxy check", "between 1 and 65535"},
		{"noproxy check clusters/example api.corp.example:0", "noproxy check", "between 1 and 65535"},
		{"noproxy check clusters/example fd00::1:443x", "noproxy check", "not a DNS name"},
		{"noproxy check clusters/example 999.1.1.1", "noproxy check", "not a DNS name"},
		{"noproxy check clusters/example fe80::1%eth0", "noproxy check", "not a DNS name"},
		{"noproxy check clusters/example bücher.example", "noproxy check", "not a DNS name"},
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			got, err := Parse(tt.in)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("Parse(%q) = %#v, %v; want *UsageError", tt.in, got, err)
			}
			if got != nil {
				t.Errorf("Parse(%q) returned a command with the error: %#v", tt.in, got)
			}
			if ue.Command != tt.command {
				t.Errorf("Command = %q, want %q", ue.Command, tt.command)
			}
			if !strings.Contains(ue.Hint, tt.hint) {
				t.Errorf("Hint = %q, want it to contain %q", ue.Hint, tt.hint)
			}
			wantUsage := Usage(tt.command)
			if tt.command == "" {
				wantUsage = Usage("help")
			}
			if ue.Usage != wantUsage || !strings.HasPrefix(ue.Usage, "/hcp ") {
				t.Errorf("Usage = %q, want %q", ue.Usage, wantUsage)
			}
			if strings.ContainsAny(ue.Hint, "\n\r\x00\x1b") || len(ue.Hint) > 300 {
				t.Errorf("Hint is not one short line: %q", ue.Hint)
			}
			if !strings.Contains(ue.Error(), ue.Usage) {
				t.Errorf("Error() = %q lacks the usage", ue.Error())
			}
		})
	}
}

func TestUsageAndHelp(t *testing.T) {
	for name, want := range map[string]string{
		"status":        "/hcp status [cluster]",
		"FIX":           "/hcp fix noproxy <cluster> [--add ENTRY,...]",
		"fix noproxy":   "/hcp fix noproxy <cluster> [--add ENTRY,...]",
		"noproxy check": "/hcp noproxy check <cluster> <host[:port]>",
		"digest":        "/hcp digest now",
		"audit verify":  "/hcp audit [n|verify]",
		"whoami":        "/hcp whoami",
		"nope":          "",
		"":              "",
	} {
		if got := Usage(name); got != want {
			t.Errorf("Usage(%q) = %q, want %q", name, got, want)
		}
	}
	help := Help()
	for _, s := range specs {
		if !strings.Contains(help, s.usage()) {
			t.Errorf("Help() lacks %q", s.usage())
		}
	}
	if n := strings.Count(help, "\n"); n != len(specs) {
		t.Errorf("Help() has %d lines, want %d", n+1, len(specs)+1)
	}
}

func TestParseNoProxyEntry(t *testing.T) {
	ok := map[string]string{
		"kubernetes":             "kubernetes",
		"kubernetes.default.svc": "kubernetes.default.svc",
		".svc":                   ".svc",
		"*.apps.example.com":     "*.apps.example.com",
		"Example.COM":            "example.com",
		"172.31.0.1":             "172.31.0.1",
		"172.31.0.0/16":          "172.31.0.0/16",
		"0.0.0.0/0":              "0.0.0.0/0",
		"fd00::/8":               "fd00::/8",
		"FD00:0:0::1":            "fd00::1",
		"[fd00::1]:6443":         "[fd00::1]:6443",
		"10.0.0.1:6443":          "10.0.0.1:6443",
		".example.com:443":       ".example.com:443",
		"api:443":                "api:443",
	}
	for in, want := range ok {
		got, err := ParseNoProxyEntry(in)
		if err != nil || got != want {
			t.Errorf("ParseNoProxyEntry(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{
		"", "*", "*.", ".", "..", "a..b", "-a.com", "a_b.com", "a b", "a\tb", "a;b", "$(id)", "`id`", "a|b",
		"a&b", "a>b", "http://a", "a/b", "10.0.0.1/33", "10.0.0.1/8", "fe80::1%eth0", "fd00::1:443:", "[fd00::1]",
		"[fd00::1]:", "[a.com]:443", "a.com:0", "a.com:65536", "a.com:+1", "a.com:", ":443", "1.2.3", "999.1.1.1",
		"010.0.0.1", "*.10.0.0.1", ".1.2.3.4", "exаmple.com", "bücher.de", strings.Repeat("a", 254),
		strings.Repeat("a", 64) + ".com", "a.com\n", "a.com\x00",
	}
	for _, in := range bad {
		if got, err := ParseNoProxyEntry(in); err == nil {
			t.Errorf("ParseNoProxyEntry(%q) = %q, want an error", in, got)
		}
	}
}

func TestValidID(t *testing.T) {
	for _, s := range []string{"act-abcd", "inc-0a1b2c3d", "abcdefgh-" + strings.Repeat("z", 32)} {
		if !ValidID(s) {
			t.Errorf("ValidID(%q) = false", s)
		}
	}
	for _, s := range []string{"", "act-abc", "act_abcd", "ACT-abcd", "act-ABCD", "abcdefghi-abcd", "act-" + strings.Repeat("z", 33), "act-abcd\n", " act-abcd", "-abcd", "act-abcd-efgh"} {
		if ValidID(s) {
			t.Errorf("ValidID(%q) = true", s)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1m": time.Minute, "90m": 90 * time.Minute, "2h": 2 * time.Hour, "1d": 24 * time.Hour,
		"1d12h": 36 * time.Hour, "30d": 30 * 24 * time.Hour, "720h": 30 * 24 * time.Hour, "1.5h": 90 * time.Minute,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseDuration(formatDuration(got)); err != nil || back != got {
			t.Errorf("formatDuration(%v) = %q does not read back: %v, %v", got, formatDuration(got), back, err)
		}
	}
	for _, in := range []string{"", "0", "59s", "30d1s", "31d", "-1h", "1d+1h", "1D", "d", "1dd", "1 h", "1h\n", "0d"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}
