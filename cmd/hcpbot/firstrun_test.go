package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The first-run mistakes a new user makes, one row each: `config check`
// says what start-up would die of, at the field to fix, and never ok.
// Each row's file is otherwise valid; where start-up reads the host (the
// kubeconfig loading rules, files the configuration names), the row sets
// the host up as the mistake has it. KUBECONFIG points at a file that is
// not there, so the loading rules find no ~/.kube/config on any machine
// (clientcmd reads the home folder once, at init).
func TestConfigCheckFirstRunMistakes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const kubeconfig = "apiVersion: v1\nkind: Config\ncurrent-context: mgmt\ncontexts:\n- name: mgmt\n  context: {cluster: mgmt, user: admin}\nclusters:\n- name: mgmt\n  cluster: {server: \"https://api.mgmt.example:6443\"%s}\nusers:\n- name: admin\n  user: {token: not-read}\n"
	noCA := write("no-ca.kubeconfig", strings.Replace(kubeconfig, "%s", ", certificate-authority: "+filepath.Join(dir, "absent-ca.crt"), 1))
	// A folder where the CA file should be: unreadable as a file for
	// every user, root included.
	unreadableCA := filepath.Join(dir, "unreadable-ca.crt")
	if err := os.Mkdir(unreadableCA, 0o700); err != nil {
		t.Fatal(err)
	}
	badCA := write("bad-ca.kubeconfig", strings.Replace(kubeconfig, "%s", ", certificate-authority: "+unreadableCA, 1))
	noContext := write("no-context.kubeconfig", strings.Replace(strings.Replace(kubeconfig, "%s", "", 1), "current-context: mgmt\n", "", 1))

	for _, tc := range []struct {
		name, config string
		env          map[string]string
		field, want  string // the problem's field and a substring of it
	}{
		{
			name:   "no kubeconfig: agent.kubeconfig empty, not in a pod, no ~/.kube/config",
			config: "agent:\n  source: mgmt-1\n",
			env:    map[string]string{"KUBECONFIG": filepath.Join(dir, "absent")},
			field:  "agent.kubeconfig", want: "no configuration has been provided",
		},
		{
			name:   "a kubeconfig with no current context",
			config: "agent:\n  source: mgmt-1\n  kubeconfig: " + noContext + "\n",
			field:  "agent.kubeconfig", want: "no current-context",
		},
		{
			name:   "the CA file the kubeconfig names is not there",
			config: "agent:\n  source: mgmt-1\n  kubeconfig: " + noCA + "\n",
			field:  "agent.kubeconfig", want: "absent-ca.crt",
		},
		{
			name:   "the CA file the kubeconfig names cannot be read",
			config: "agent:\n  source: mgmt-1\n  kubeconfig: " + badCA + "\n",
			field:  "agent.kubeconfig", want: "unreadable-ca.crt",
		},
		{
			name:   "a NATS URL that does not parse",
			config: "nats:\n  urls: [\"nats://[::1\"]\nagent:\n  source: mgmt-1\n  kubeconfig: " + noContext + "\n",
			field:  "nats.urls[0]", want: "",
		},
		{
			name:   "a Slack token written in the file",
			config: "bot:\n  defaultChannel: C0123456789\nslack:\n  botToken: xoxb-1111-2222-SECRETSECRET\n  signingSecretEnv: S\n",
			field:  "slack.botToken", want: "botTokenEnv",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if tc.env == nil {
				t.Setenv("KUBECONFIG", filepath.Join(dir, "absent"))
			}
			p := configFile(t, tc.config)
			code, out, errOut := configRun(t, map[string]string{"S": "signing-secret"}, "config", "check", "--config", p)
			if code != 1 || !strings.Contains(out, ": "+tc.field+": ") || !strings.Contains(out, tc.want) {
				t.Errorf("code %d, want 1 and a problem of %s containing %q:\n%s%s", code, tc.field, tc.want, out, errOut)
			}
			if strings.Contains(out+errOut, "SECRETSECRET") || strings.Contains(out+errOut, "not-read") {
				t.Errorf("a secret printed:\n%s%s", out, errOut)
			}
		})
	}
}
