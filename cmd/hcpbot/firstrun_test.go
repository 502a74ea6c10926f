package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The first-run mistakes a new user makes, one row each: `config check`
// says what start-up dies of, at the field to fix, and never ok; the
// process started with the same file on the same host exits, saying the
// same where the row says so. Each row's file is otherwise valid. The
// host is the row's (its environment and service account folder, nothing
// of the machine the test runs on): a laptop with an empty home folder
// unless the row says otherwise. Nothing is dialled but the test's own
// API server (the store row, which must get past the agent's /version).
func TestConfigCheckFirstRunMistakes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const kubeconfig = "apiVersion: v1\nkind: Config\ncurrent-context: mgmt\ncontexts:\n- name: mgmt\n  context: {cluster: mgmt, user: admin}\nclusters:\n- name: mgmt\n  cluster: {server: \"https://api.mgmt.example:6443\"%s}\nusers:\n- name: admin\n  user: {token: not-read}\n"
	good := write("good.kubeconfig", strings.Replace(kubeconfig, "%s", "", 1))
	noCA := write("no-ca.kubeconfig", strings.Replace(kubeconfig, "%s", ", certificate-authority: "+filepath.Join(dir, "absent-ca.crt"), 1))
	// A folder where the CA file should be: unreadable as a file for
	// every user, root included.
	unreadableCA := filepath.Join(dir, "unreadable-ca.crt")
	if err := os.Mkdir(unreadableCA, 0o700); err != nil {
		t.Fatal(err)
	}
	badCA := write("bad-ca.kubeconfig", strings.Replace(kubeconfig, "%s", ", certificate-authority: "+unreadableCA, 1))
	noContext := write("no-context.kubeconfig", strings.Replace(strings.Replace(kubeconfig, "%s", "", 1), "current-context: mgmt\n", "", 1))
	emptyHome := filepath.Join(dir, "home-empty")
	if err := os.Mkdir(emptyHome, 0o700); err != nil {
		t.Fatal(err)
	}
	noServiceAccount := filepath.Join(dir, "no-service-account")
	// A pod started with automountServiceAccountToken: false: the
	// kubelet sets the Service's variables and mounts no token.
	pod := map[string]string{"KUBERNETES_SERVICE_HOST": "172.31.0.1", "KUBERNETES_SERVICE_PORT": "443"}

	for _, tc := range []struct {
		name, config string
		env          map[string]string // on top of S and HOME (emptyHome; "" unsets)
		field        string            // the problem's field
		want         []string          // substrings of the problem
		// start is the process the file is for; sameAtStart: it exits
		// with the problem's very words.
		start       string
		sameAtStart bool
		// cluster: the agent reaches the test's API server, so that it
		// gets as far as the mistake (the kubeconfig is set at run time).
		cluster bool
	}{
		{
			name:   "no kubeconfig: agent.kubeconfig empty, not in a pod, no ~/.kube/config",
			config: "agent:\n  source: mgmt-1\n",
			field:  "agent.kubeconfig",
			want:   []string{"KUBERNETES_SERVICE_HOST", "no kubeconfig at " + filepath.Join(emptyHome, ".kube", "config"), "give the management cluster's kubeconfig (agent.kubeconfig, --kubeconfig)"},
			start:  "agent", sameAtStart: true,
		},
		{
			name:   "no kubeconfig: KUBECONFIG names a file that is not there",
			config: "agent:\n  source: mgmt-1\n",
			env:    map[string]string{"KUBECONFIG": filepath.Join(dir, "absent")},
			field:  "agent.kubeconfig",
			want:   []string{"KUBECONFIG (" + filepath.Join(dir, "absent") + ")", "give the management cluster's kubeconfig"},
			start:  "agent", sameAtStart: true,
		},
		{
			name:   "in a pod without its service account token",
			config: "agent:\n  source: mgmt-1\n",
			env:    pod,
			field:  "agent.kubeconfig",
			want:   []string{"the service account token", filepath.Join(noServiceAccount, "token")},
			start:  "agent", sameAtStart: true,
		},
		{
			name:   "a kubeconfig with no current context",
			config: "agent:\n  source: mgmt-1\n  kubeconfig: " + noContext + "\n",
			field:  "agent.kubeconfig", want: []string{"no current-context"},
			start: "agent",
		},
		{
			name:   "KUBECONFIG names a kubeconfig with no current context",
			config: "agent:\n  source: mgmt-1\n",
			env:    map[string]string{"KUBECONFIG": noContext},
			field:  "agent.kubeconfig", want: []string{"KUBECONFIG (" + noContext + ") has no current context with a cluster"},
			start: "agent", sameAtStart: true,
		},
		{
			name:   "the CA file the kubeconfig names is not there",
			config: "agent:\n  source: mgmt-1\n  kubeconfig: " + noCA + "\n",
			field:  "agent.kubeconfig", want: []string{"absent-ca.crt"},
			start: "agent", sameAtStart: true,
		},
		{
			name:   "the CA file the kubeconfig names cannot be read",
			config: "agent:\n  source: mgmt-1\n  kubeconfig: " + badCA + "\n",
			field:  "agent.kubeconfig", want: []string{"unreadable-ca.crt"},
			start: "agent", sameAtStart: true,
		},
		{
			name:   "the embedded NATS server without a store: no nats.storeDir, no HOME",
			config: "agent:\n  source: mgmt-1\n  kubeconfig: %s\n",
			env:    map[string]string{"HOME": ""},
			field:  "nats.storeDir", want: []string{"set nats.storeDir, or nats.urls"},
			start: "agent", sameAtStart: true, cluster: true,
		},
		{
			name:   "a NATS URL that does not parse",
			config: "nats:\n  urls: [\"nats://[::1\"]\nagent:\n  source: mgmt-1\n  kubeconfig: " + good + "\n",
			field:  "nats.urls[0]",
			start:  "agent", sameAtStart: true,
		},
		{
			name:   "a Slack token written in the file",
			config: "bot:\n  defaultChannel: C0123456789\nslack:\n  botToken: xoxb-1111-2222-SECRETSECRET\n  signingSecretEnv: S\n",
			field:  "slack.botToken", want: []string{"botTokenEnv"},
			start: "bot", sameAtStart: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"S": "signing-secret", "HOME": emptyHome}
			maps.Copy(vars, tc.env)
			config := tc.config
			if tc.cluster {
				env.Need(t)
				config = strings.Replace(config, "%s", managementKubeconfig(t), 1)
			}
			p := configFile(t, config)
			code, out, errOut := configRunOn(t, noServiceAccount, vars, "config", "check", "--config", p)
			_, problem, found := strings.Cut(strings.TrimSpace(out), ": "+tc.field+": ")
			if code != 1 || !found || strings.Contains(problem, "\n") {
				t.Fatalf("code %d, want 1 and one problem of %s:\n%s%s", code, tc.field, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(problem, w) {
					t.Errorf("the problem does not say %q:\n%s", w, out)
				}
			}
			startCode, startErr := startOn(t, noServiceAccount, vars, tc.start, "--config", p)
			if startCode == 0 || (tc.sameAtStart && !strings.Contains(startErr, problem)) {
				t.Errorf("hcpbot %s: exit %d, want non-zero saying %q:\n%s", tc.start, startCode, problem, startErr)
			}
			for _, s := range []string{out, errOut, startErr} {
				if strings.Contains(s, "SECRETSECRET") || strings.Contains(s, "not-read") {
					t.Errorf("a secret printed:\n%s", s)
				}
			}
			t.Logf("%s", strings.TrimSpace(out))
		})
	}

	// Where the loading rules find a cluster the check says ok:
	// ~/.kube/config, else KUBECONFIG, which wins over it.
	home := filepath.Join(dir, "home")
	write("home/.kube/config", strings.Replace(kubeconfig, "%s", "", 1))
	p := configFile(t, "agent:\n  source: mgmt-1\n")
	for _, vars := range []map[string]string{
		{"HOME": home},
		{"HOME": emptyHome, "KUBECONFIG": filepath.Join(dir, "absent") + string(filepath.ListSeparator) + good},
	} {
		if code, out, errOut := configRunOn(t, noServiceAccount, vars, "config", "check", "--config", p); code != 0 {
			t.Errorf("%v: code %d, want ok\n%s%s", vars, code, out, errOut)
		}
	}
	if code, out, errOut := configRunOn(t, noServiceAccount, map[string]string{"HOME": home, "KUBECONFIG": noContext}, "config", "check", "--config", p); code != 1 {
		t.Errorf("KUBECONFIG set: ~/.kube/config is not read, as kubectl does not: code %d\n%s%s", code, out, errOut)
	}
}

// startOn starts a process in-process on the host of configRunOn until
// it exits; a process that keeps running past the deadline (it started
// where it should not) counts as a start.
func startOn(t *testing.T, serviceAccount string, env map[string]string, args ...string) (code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out syncBuffer
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(k string) string { return env[k] }, serviceAccount: serviceAccount}
	code = c.main(ctx, args)
	if ctx.Err() != nil {
		code = 0
	}
	return code, out.String()
}
