package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// configRun runs with an environment, for the proxy and secret checks,
// in a pod of the management cluster, where configs/deploy runs the
// agent and where the configurations of these tests (agent.kubeconfig
// empty: in-cluster) are meant to start: inPod's host, env on top.
func configRun(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	serviceAccount, podEnv := inPod(t, env)
	return configRunOn(t, serviceAccount, podEnv, args...)
}

// configRunOn runs on a host of the test's: env is its whole environment
// and serviceAccount the folder of a pod's service account (cli.serviceAccount).
func configRunOn(t *testing.T, serviceAccount string, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(k string) string { return env[k] }, serviceAccount: serviceAccount}
	code = c.main(context.Background(), args)
	return code, out.String(), errOut.String()
}

// inPod is a pod's host as rest.InClusterConfig reads it (client-go
// rest/config.go:546-577): the service account's token and CA in a
// folder, and the API server's Service in KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT (a service CIDR address, never dialled: the
// checks here are offline); HOME a writable folder (where the embedded
// NATS server's store goes without nats.storeDir); env on top.
func inPod(t *testing.T, env map[string]string) (serviceAccount string, podEnv map[string]string) {
	t.Helper()
	serviceAccount = t.TempDir()
	natstest.WriteTLS(t, serviceAccount) // its ca.crt
	if err := os.WriteFile(filepath.Join(serviceAccount, "token"), []byte("eyJhbGciOiJSUzI1NiJ9.not-read.sig"), 0o600); err != nil {
		t.Fatal(err)
	}
	podEnv = map[string]string{"KUBERNETES_SERVICE_HOST": "172.31.0.1", "KUBERNETES_SERVICE_PORT": "443", "HOME": t.TempDir()}
	maps.Copy(podEnv, env)
	return serviceAccount, podEnv
}

func configFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hcpbot.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// exampleEnv holds the variables configs/example.yaml names.
var exampleEnv = map[string]string{"SLACK_BOT_TOKEN": "xoxb-1-2-example", "SLACK_SIGNING_SECRET": "example0signing0secret"}

func TestConfigCheckExample(t *testing.T) {
	p := configFile(t, configs.Example)
	code, out, errOut := configRun(t, exampleEnv, "config", "check", "--config", p)
	if code != 0 || !strings.HasPrefix(out, "ok: "+p+"\n") || errOut != "" {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"nats: embedded server, store /var/lib/hcpbot/nats",
		"agent: source mgmt-1, kubeconfig in-cluster, listen :8080",
		"bot: listen :8081, ops :8082, 2 route(s), default channel C0123456789",
		"slack: https://slack.com/api/, bot token from env SLACK_BOT_TOKEN",
		`digest daily: "0 8 * * 1-5" (Europe/Berlin) → C0123456789`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestConfigCheckProblems(t *testing.T) {
	const tok = "xoxb-1111-2222-SECRETSECRET"
	p := configFile(t, "nats:\n  streamReplicas: 2\nagent:\n  source: MGMT\n  bogus: 1\nbot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: "+tok+"\n  signingSecretEnv: S\n")
	code, out, errOut := run(t, "config", "check", "--config", p)
	if code != 1 {
		t.Fatalf("code %d, want 1\n%s%s", code, out, errOut)
	}
	want := []string{
		p + ":2: nats.streamReplicas: 2: must be 1, 3 or 5",
		p + ":4: agent.source: \"MGMT\" is not a management cluster name",
		p + ":5: agent.bogus: unknown key",
		p + ":9: slack.botTokenEnv: this value looks like a Slack token",
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(want), out)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	if !strings.Contains(errOut, "4 problem(s)") {
		t.Errorf("stderr: %q", errOut)
	}
	if strings.Contains(out+errOut, "SECRETSECRET") {
		t.Errorf("output echoes the token:\n%s%s", out, errOut)
	}
}

func TestConfigCheckJSON(t *testing.T) {
	var rep configReport
	p := configFile(t, "agent:\n  source: mgmt-1\n  listen: \"8080\"\n")
	code, out, _ := run(t, "config", "check", "--json", "--config", p)
	if code != 1 {
		t.Fatalf("code %d", code)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.OK || len(rep.Problems) != 1 || rep.Problems[0].Line != 3 || rep.Problems[0].Field != "agent.listen" || rep.File != p {
		t.Errorf("%+v", rep)
	}

	p = configFile(t, configs.Example)
	code, out, _ = configRun(t, exampleEnv, "config", "check", "--config", p, "--json")
	rep = configReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("code %d %v\n%s", code, err, out)
	}
	if !rep.OK || rep.For != "all" || len(rep.Problems) != 0 || len(rep.Summary) < 5 || rep.Warnings == nil {
		t.Errorf("%+v", rep)
	}
	// Arrays are [] rather than null, so consumers need no special case.
	if !strings.Contains(out, `"problems": []`) || !strings.Contains(out, `"warnings": []`) {
		t.Errorf("empty lists not [] in:\n%s", out)
	}
}

func TestConfigCheckUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"config"}, 2, "missing subcommand"},
		{[]string{"config", "lint"}, 2, `unknown subcommand "lint"`},
		{[]string{"config", "check"}, 2, "--config is required"},
		{[]string{"config", "check", "--config", "a.yaml", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"config", "check", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, 1, "no such file"},
		{[]string{"config", "--help"}, 0, ""},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: code %d, stderr %q; want %d, %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
	// HCPBOT_CONFIG stands in for --config.
	p := configFile(t, "agent:\n  source: mgmt-1\n")
	if code, out, _ := configRun(t, map[string]string{"HCPBOT_CONFIG": p}, "config", "check"); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Errorf("HCPBOT_CONFIG: code %d %s", code, out)
	}
}

func TestConfigCheckProxyWarning(t *testing.T) {
	inCluster := configFile(t, "agent:\n  source: mgmt-1\n")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig := func(extra string) {
		t.Helper()
		kc := "apiVersion: v1\nkind: Config\ncurrent-context: mgmt\ncontexts:\n- name: mgmt\n  context: {cluster: mgmt, user: admin}\nclusters:\n- name: mgmt\n  cluster:\n    server: https://api.mgmt.example:6443\n" + extra + "users:\n- name: admin\n  user: {token: not-read}\n"
		if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKubeconfig("")
	withKubeconfig := configFile(t, "agent:\n  source: mgmt-1\n  kubeconfig: "+kubeconfig+"\n")
	proxy := "http://user:pa55@proxy.corp.example:3128"

	for _, tc := range []struct {
		name   string
		config string
		env    map[string]string
		want   []string // substrings of stderr; none means no warning
	}{
		{"no proxy configured", inCluster, map[string]string{"KUBERNETES_SERVICE_HOST": "172.31.0.1"}, nil},
		{"in-cluster, only .svc exempt: the IP goes through the proxy", inCluster,
			map[string]string{"HTTPS_PROXY": proxy, "NO_PROXY": ".svc", "KUBERNETES_SERVICE_HOST": "172.31.0.1", "KUBERNETES_SERVICE_PORT": "443"},
			[]string{"warning: agent: Kubernetes API traffic to https://172.31.0.1:443, the in-cluster API address (KUBERNETES_SERVICE_HOST), would go through the proxy http://***@proxy.corp.example:3128 from HTTPS_PROXY: NO_PROXY does not exempt 172.31.0.1"}},
		{"in-cluster, service CIDR and .svc exempt", inCluster,
			map[string]string{"HTTPS_PROXY": proxy, "NO_PROXY": ".svc,172.31.0.0/16", "KUBERNETES_SERVICE_HOST": "172.31.0.1"}, nil},
		{"in-cluster, nothing exempt", inCluster,
			map[string]string{"https_proxy": proxy},
			[]string{"https://kubernetes.default.svc, the in-cluster API name, would go through the proxy http://***@proxy.corp.example:3128 from https_proxy: NO_PROXY is not set"}},
		{"upper-case NO_PROXY wins over lower-case, as in net/http", inCluster,
			map[string]string{"HTTPS_PROXY": proxy, "NO_PROXY": "example.org", "no_proxy": ".svc"},
			[]string{"kubernetes.default.svc", "NO_PROXY does not exempt kubernetes.default.svc"}},
		{"kubeconfig server not exempt", withKubeconfig,
			map[string]string{"HTTPS_PROXY": proxy, "NO_PROXY": "localhost"},
			[]string{"https://api.mgmt.example:6443, the API server of " + kubeconfig + ", would go through the proxy"}},
		{"kubeconfig server exempt by domain", withKubeconfig,
			map[string]string{"HTTPS_PROXY": proxy, "NO_PROXY": ".example"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := configRun(t, tc.env, "config", "check", "--config", tc.config)
			if code != 0 || !strings.HasPrefix(out, "ok: ") {
				t.Fatalf("code %d\n%s%s", code, out, errOut)
			}
			if len(tc.want) == 0 && errOut != "" {
				t.Errorf("unexpected warning: %s", errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if strings.Contains(errOut, "pa55") {
				t.Errorf("proxy password printed: %s", errOut)
			}
		})
	}

	t.Run("kubeconfig with its own proxy-url", func(t *testing.T) {
		writeKubeconfig("    proxy-url: http://other-proxy:3128\n")
		code, _, errOut := configRun(t, map[string]string{"HTTPS_PROXY": proxy}, "config", "check", "--config", withKubeconfig)
		if code != 0 || errOut != "" {
			t.Errorf("code %d, stderr %q", code, errOut)
		}
	})
	t.Run("not in a pod: the server KUBECONFIG names, not the in-cluster one", func(t *testing.T) {
		writeKubeconfig("")
		noPod := filepath.Join(t.TempDir(), "no-service-account")
		code, out, errOut := configRunOn(t, noPod, map[string]string{"HTTPS_PROXY": proxy, "NO_PROXY": ".svc", "KUBECONFIG": kubeconfig, "HOME": t.TempDir()}, "config", "check", "--config", inCluster)
		want := "agent: Kubernetes API traffic to https://api.mgmt.example:6443, the API server of KUBECONFIG (" + kubeconfig + "), would go through the proxy"
		if code != 0 || !strings.Contains(errOut, want) || strings.Contains(errOut, "in-cluster") {
			t.Errorf("code %d, want ok and only %q:\n%s%s", code, want, out, errOut)
		}
	})
	t.Run("unreadable kubeconfig", func(t *testing.T) {
		// A problem (TestConfigCheckKubeconfig), not also a warning.
		p := configFile(t, "agent:\n  source: mgmt-1\n  kubeconfig: /nonexistent/kubeconfig\n")
		code, out, errOut := configRun(t, map[string]string{"HTTPS_PROXY": proxy}, "config", "check", "--config", p)
		if code != 1 || !strings.Contains(out, "agent.kubeconfig: open /nonexistent/kubeconfig") || strings.Contains(errOut, "warning") {
			t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("--json carries the warnings", func(t *testing.T) {
		code, out, _ := configRun(t, map[string]string{"HTTPS_PROXY": proxy, "NO_PROXY": ".svc"}, "config", "check", "--json", "--config", inCluster)
		var rep configReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || len(rep.Warnings) != 1 {
			t.Errorf("code %d %v %+v", code, err, rep)
		}
	})
}

func TestConfigCheckSecrets(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "bot-token")
	p := configFile(t, "bot:\n  defaultChannel: C0123456789\nslack:\n  botTokenFile: "+tokenFile+"\n  signingSecretEnv: SLACK_SIGNING_SECRET\n")

	// With --secrets=false nothing is resolved: CI can check a file
	// without the production environment.
	if code, out, _ := run(t, "config", "check", "--secrets=false", "--config", p); code != 0 {
		t.Fatalf("code %d\n%s", code, out)
	}
	code, out, errOut := run(t, "config", "check", "--config", p)
	if code != 1 ||
		!strings.Contains(out, "slack.botTokenFile: open "+tokenFile) ||
		!strings.Contains(out, "slack.signingSecretEnv: environment variable SLACK_SIGNING_SECRET is not set or empty") {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if err := os.WriteFile(tokenFile, []byte("xoxb-1-2-BOTSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = configRun(t, map[string]string{"SLACK_SIGNING_SECRET": "SIGNINGSECRET0123"}, "config", "check", "--config", p)
	if code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("code %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, "BOTSECRET") || strings.Contains(out+errOut, "SIGNINGSECRET0123") {
		t.Errorf("secret printed:\n%s%s", out, errOut)
	}
}

// config check reads agent.kubeconfig as the agent will load it, and
// reports what makes it unusable under the field's name; it dials nothing
// (the servers named here do not exist).
func TestConfigCheckKubeconfig(t *testing.T) {
	dir := t.TempDir()
	const good = "apiVersion: v1\nkind: Config\ncurrent-context: mgmt\ncontexts:\n- name: mgmt\n  context: {cluster: mgmt, user: admin}\nclusters:\n- name: mgmt\n  cluster: {server: \"https://api.mgmt.example:6443\"}\nusers:\n- name: admin\n  user: {token: not-read}\n"
	for _, tc := range []struct {
		name, content string
		want          string // substring of the problem; empty: ok
	}{
		{"usable", good, ""},
		{"missing", "", "no such file or directory"},
		{"not a kubeconfig", "clusters: [this is not\n", "yaml"},
		{"no current context", strings.Replace(good, "current-context: mgmt\n", "", 1), "no current-context"},
		{"unknown current context", strings.Replace(good, "current-context: mgmt", "current-context: other", 1), `current-context "other" not found`},
		{"cluster without server", strings.Replace(good, `server: "https://api.mgmt.example:6443"`, `server: ""`, 1), "has no server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.content != "" {
				if err := os.WriteFile(kc, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p := configFile(t, "agent:\n  source: mgmt-1\n  kubeconfig: "+kc+"\n")
			code, out, errOut := configRun(t, nil, "config", "check", "--config", p)
			if tc.want == "" {
				if code != 0 || !strings.Contains(out, "kubeconfig "+kc) {
					t.Fatalf("code %d\n%s%s", code, out, errOut)
				}
				return
			}
			if code != 1 || !strings.HasPrefix(out, p+":3: agent.kubeconfig: ") || !strings.Contains(out, tc.want) {
				t.Errorf("code %d, want 1 and a problem of agent.kubeconfig containing %q:\n%s%s", code, tc.want, out, errOut)
			}
			if strings.Contains(out+errOut, "not-read") {
				t.Errorf("kubeconfig content printed:\n%s%s", out, errOut)
			}
		})
	}
}
