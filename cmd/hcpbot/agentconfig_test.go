package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// agentSettingsFor runs the agent's command-line and file handling alone.
func agentSettingsFor(t *testing.T, env map[string]string, args ...string) (agentFlags, error) {
	t.Helper()
	c := &cli{stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: &strings.Builder{}, getenv: func(k string) string { return env[k] }}
	return agentSettings(c, args)
}

// `hcpbot agent --config` reads the agent, nats and log sections; the few
// flags left override the file, their environment variables too, and
// POD_NAMESPACE is only a default.
func TestAgentConfigPrecedence(t *testing.T) {
	file := configFile(t, `nats:
  storeDir: /var/lib/hcpbot/nats
  embeddedListen: 127.0.0.1:4223
agent:
  source: mgmt-file
  listen: "127.0.0.1:9001"
  leaderElection:
    namespace: ops
    leaseName: lease-file
    leaseDuration: 20s
  bufferEvents: 42
  hostedProbeInterval: 3s
  requireFourEyes: false
  approvers: [U01234ABCD]
log:
  level: debug
`)
	for _, tc := range []struct {
		name  string
		env   map[string]string
		args  []string
		check func(f agentFlags) bool
	}{
		{"no file: the file's defaults", map[string]string{"POD_NAMESPACE": "hcpbot"}, []string{"--source", "mgmt-flag"}, func(f agentFlags) bool {
			return f.source == "mgmt-flag" && f.listen == ":8080" && f.leaderElect && f.leaseName == "hcpbot-agent" && f.leaseNamespace == "hcpbot" &&
				f.bufferEvents == 10000 && f.probeInterval == 15*time.Second && f.requireFourEyes && f.logLevel == "info" && f.logFormat == "json" &&
				f.events.IsZero() && f.natsStore == "" && f.natsListen == ""
		}},
		// The events stream's settings the file writes, and only those (a
		// null is the default): the agent applies or checks nothing else.
		{"events stream settings written", nil, []string{"--config", configFile(t, "nats:\n  eventsMaxAge: 24h\n  duplicateWindow: null\nagent:\n  source: mgmt-file\n")}, func(f agentFlags) bool {
			return f.events == bus.EventsSettings{MaxAge: 24 * time.Hour}
		}},
		{"file only", map[string]string{"POD_NAMESPACE": "hcpbot"}, []string{"--config", file}, func(f agentFlags) bool {
			return f.source == "mgmt-file" && f.listen == "127.0.0.1:9001" && f.leaseName == "lease-file" && f.leaseNamespace == "ops" &&
				f.lease.LeaseDuration == 20*time.Second && f.bufferEvents == 42 && f.probeInterval == 3*time.Second &&
				!f.requireFourEyes && len(f.approvers) == 1 && f.logLevel == "debug" && f.natsStore == "/var/lib/hcpbot/nats" && f.natsListen == "127.0.0.1:4223" &&
				f.events.IsZero()
		}},
		{"flags override the file", nil, []string{"--config", file, "--listen", "127.0.0.1:9002", "--lease-name", "lease-flag", "--leader-elect=false", "--source", "mgmt-flag", "--log-format", "console"}, func(f agentFlags) bool {
			return f.source == "mgmt-flag" && f.listen == "127.0.0.1:9002" && f.leaseName == "lease-flag" && !f.leaderElect && f.logFormat == "console" &&
				f.bufferEvents == 42 && f.probeInterval == 3*time.Second
		}},
		{"a flag's variable overrides the file, the flag the variable", map[string]string{"HCPBOT_SOURCE": "mgmt-env", "HCPBOT_TRUSTED_KEYS": ""}, []string{"--config", file}, func(f agentFlags) bool {
			return f.source == "mgmt-env"
		}},
		{"the flag wins over its variable", map[string]string{"HCPBOT_SOURCE": "mgmt-env"}, []string{"--config", file, "--source", "mgmt-flag"}, func(f agentFlags) bool {
			return f.source == "mgmt-flag"
		}},
		{"POD_NAME is the identity's default", map[string]string{"POD_NAME": "pod-0"}, []string{"--config", file}, func(f agentFlags) bool {
			return f.identity == "pod-0"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := agentSettingsFor(t, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(f) {
				t.Errorf("settings %+v", f)
			}
		})
	}

	missingSeed := filepath.Join(t.TempDir(), "nkey.seed")
	for _, tc := range []struct {
		name string
		args []string
		file string
		want string
	}{
		{"a setting that is only in the file", []string{"--source", "m", "--buffer-events", "5"}, "", "flag provided but not defined: -buffer-events"},
		{"the probe interval is only in the file", []string{"--source", "m", "--hosted-probe-interval", "1s"}, "", "flag provided but not defined"},
		{"no agent section", nil, "bot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n", "no agent section"},
		{"no source anywhere", []string{}, "", "--source is required"},
		{"a file the file names, with its line", nil, "nats:\n  urls: [tls://127.0.0.1:4222]\n  nkeySeedFile: " + missingSeed + "\nagent:\n  source: m\n", ":3: nats.nkeySeedFile: open " + missingSeed},
		{"credsEnv", nil, "nats:\n  urls: [tls://127.0.0.1:4222]\n  credsEnv: NATS_CREDS\nagent:\n  source: m\n", "nats.credsEnv: env NATS_CREDS is not a NATS .creds file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", configFile(t, tc.file)}, args...)
			}
			_, err := agentSettingsFor(t, map[string]string{"NATS_CREDS": "x"}, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// `hcpbot agent --config` against a real management cluster: the file's
// Lease name and namespace are used, --listen overrides the file's
// address (which could not be bound), and the file's hostedProbeInterval
// paces the hosted API server's probe: a stopped hosted API server is
// reported within seconds, which the 15 s default could not do (it takes
// two failed probes).
func TestAgentCommandConfigFile(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "cfgfile")
	hosted := env.HostedCluster(t, spec)
	srv := natstest.RunServer(t)
	botEventsStream(t, srv.ClientURL())
	addr := freeAddr(t)
	file := configFile(t, "nats:\n  urls: ["+srv.ClientURL()+"]\nagent:\n  source: mgmt-cfgfile\n  kubeconfig: "+managementKubeconfig(t)+
		"\n  listen: \"127.0.0.1:1\"\n  leaderElection:\n    namespace: "+ns+"\n    leaseName: agent-from-file\n  hostedProbeInterval: 1s\nlog:\n  format: json\n")
	logs := startAgentCmd(t, "--config", file, "--listen", addr, "--identity", "test-agent")

	series := `hcpbot_agent_hosted_cluster_synced{cluster="` + ns + "/" + spec.Name + `"}`
	testenv.Eventually(t, 60*time.Second, "leader and the hosted cluster synced", func() bool {
		_, body := get("http://" + addr + "/metrics")
		return strings.Contains(body, "hcpbot_agent_leader 1") && metricAtLeast(body, series, 1)
	})
	l, err := env.Kube.CoordinationV1().Leases(ns).Get(ctx, "agent-from-file", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "test-agent" {
		t.Fatalf("Lease %s/agent-from-file: %v %v", ns, l, err)
	}

	// Stop waits for the process (its graceful shutdown takes seconds);
	// the probes fail from SIGTERM on, so the clock starts there.
	stopped := time.Now()
	stopDone := make(chan struct{})
	go func() { defer close(stopDone); hosted.Server.Stop() }()
	testenv.Eventually(t, 10*time.Second, "the stopped hosted API server reported", func() bool {
		_, body := get("http://" + addr + "/metrics")
		return strings.Contains(body, series+" 0")
	})
	t.Logf("hosted API server reported down %v after SIGTERM (probe every 1s; the default 15s needs two probes, at least 15s)", time.Since(stopped).Round(10*time.Millisecond))
	<-stopDone
	if !strings.Contains(logs.String(), `"acquired the agent lease"`) {
		t.Errorf("no leader election in logs:\n%s", tail(logs.String(), 4000))
	}
}

// The arguments and variables configs/deploy/agent/deployment.yaml gives
// the agent are all ones it takes, and each reaches its setting: the
// manifest keeps working with the file-first command line.
func TestAgentDeploymentArgs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", "deploy", "agent", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(data), "\n---")
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Fatalf("args %q", c.Args)
	}
	key := testPublicKey(t)
	values := map[string]string{ // what the ConfigMap and the downward API give
		"HCPBOT_SOURCE": "mgmt-1", "HCPBOT_NATS_URL": "tls://nats.hcpbot.svc:4222", "HCPBOT_TRUSTED_KEYS": key,
		"POD_NAME": "hcpbot-agent-0", "POD_NAMESPACE": "hcpbot",
	}
	env := map[string]string{}
	for _, e := range c.Env {
		v, ok := values[e.Name]
		if e.Value != "" {
			v, ok = e.Value, true
		}
		if !ok {
			t.Fatalf("env %s: no test value", e.Name)
		}
		env[e.Name] = v
	}
	// Each mounted volume is a local directory: the ConfigMap
	// hcpbot-agent-config is the shipped agent/config.yaml, the Secret
	// hcpbot-agent-nats a seed and a CA made for the test. Paths in the
	// args and variables are read there.
	shipped, err := filepath.Abs(filepath.Join("..", "..", "configs", "deploy", "agent"))
	if err != nil {
		t.Fatal(err)
	}
	secret := t.TempDir()
	natstest.WriteTLS(t, secret)
	seed, err := os.ReadFile(natstest.NewUser(t).SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "nkey.seed"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	local := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			switch {
			case v.Name != m.Name:
			case v.ConfigMap != nil && v.ConfigMap.Name == "hcpbot-agent-config":
				local[m.MountPath] = shipped
			case v.Secret != nil && v.Secret.SecretName == "hcpbot-agent-nats":
				local[m.MountPath] = secret
			}
		}
	}
	if len(local) != 2 {
		t.Fatalf("the Deployment mounts %v: want the ConfigMap hcpbot-agent-config and the Secret hcpbot-agent-nats", local)
	}
	rewrite := func(v string) string {
		for mount, dir := range local {
			if rest, ok := strings.CutPrefix(v, mount+"/"); ok {
				return filepath.Join(dir, rest)
			}
		}
		return v
	}
	for k, v := range env {
		env[k] = rewrite(v)
	}
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		if name, v, ok := strings.Cut(a, "="); ok {
			a = name + "=" + rewrite(v)
		}
		args = append(args, a)
	}
	f, err := agentSettingsFor(t, env, args...)
	if err != nil {
		t.Fatalf("the Deployment's args %q: %v", c.Args[1:], err)
	}
	if f.identities.Empty() {
		t.Error("the shipped agent maps no identities: it could not act as the approver")
	}
	if f.source != "mgmt-1" || f.natsURLs != "tls://nats.hcpbot.svc:4222" || len(f.trustedKeys) != 1 || f.trustedKeys[0] != key ||
		f.natsNkeySeed != env["HCPBOT_NATS_NKEY_SEED"] || f.natsCA != env["HCPBOT_NATS_CA"] || f.identity != "hcpbot-agent-0" ||
		f.leaseNamespace != "hcpbot" || f.leaseName != "hcpbot-agent" || !f.leaderElect || f.listen != ":8080" || f.logFormat != "json" {
		t.Errorf("settings from the Deployment: %+v", f)
	}
}
