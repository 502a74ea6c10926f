package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// What the agent section of the config file says about action requests
// takes effect in `hcpbot all`: with agent.trustedKeys naming another key
// than approvals.signingKey, an approved fix is refused by the agent; with
// agent.requireFourEyes while the bot's approvals say fourEyes: false, a
// single approver's fix is refused. Either way the HostedCluster is
// unchanged and the reply says why.
func TestAllAgentEnforcesConfiguredKeys(t *testing.T) {
	env.Need(t)
	for _, tc := range []struct {
		name     string
		agent    func(signer, other string) string // extra agent settings
		approver string                            // who approves U0KEYS0001's proposal
		want     string
	}{
		{"untrusted signing key", func(_, other string) string { return "  trustedKeys: [" + other + "]\n" }, "U0KEYS0002", "untrusted key"},
		// The bot allows self-approval (fourEyes: false); the agent not.
		{"agent requires four-eyes", func(signer, _ string) string {
			return "  trustedKeys: [" + signer + "]\n  requireFourEyes: true\n"
		}, "U0KEYS0001", "four-eyes"},
		// The bot accepts U0KEYS0002; the agent lists only someone else.
		{"agent lists its approvers", func(signer, _ string) string {
			return "  trustedKeys: [" + signer + "]\n  approvers: [U0KEYS0009]\n"
		}, "U0KEYS0002", "not an approver this agent accepts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns, hosted, nodes, kubeconfig := allCluster(t, "keys")
			_, other := signingSeed(t)
			hcp, logs := startAllForActions(t, "keys", ns, kubeconfig, func(signer string) string { return tc.agent(signer, other) },
				"  approvers: [U0KEYS0001, U0KEYS0002]\n  fourEyes: false\n")
			if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
				t.Fatal(err)
			}
			var id string
			testenv.Eventually(t, 60*time.Second, "noProxy fix proposed", func() bool {
				reply := hcp.run(ctx, "fix noproxy "+ns+"/keys", "U0KEYS0001", func(s string) bool {
					return actionIDPattern.MatchString(s) || strings.Contains(s, "No noProxy fix") || strings.Contains(s, "Unknown cluster")
				})
				id = actionIDPattern.FindString(reply)
				return id != ""
			})
			reply := hcp.run(ctx, "approve "+id, tc.approver, func(s string) bool { return strings.Contains(s, id) })
			if !strings.Contains(reply, "refused by the agent") || !strings.Contains(reply, tc.want) {
				t.Errorf("approve answered %q, want the agent's refusal (%s)\n%s", reply, tc.want, tail(logs.String(), 3000))
			}
			u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(ctx, "keys", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy"); got != scenario.SeedNoProxy {
				t.Errorf("noProxy changed to %q", got)
			}
		})
	}
}

// startAllForActions starts `hcpbot all` (source mgmt-<name>) on the
// management cluster of kubeconfig, with a fresh approval signing key:
// agent(signer) adds agent settings, approvals holds the approvals
// section's other settings. It returns the signed /hcp sender, ready.
func startAllForActions(t *testing.T, name, ns, kubeconfig string, agent func(signer string) string, approvals string) (*slashCommander, *syncbuf.Buffer) {
	t.Helper()
	seed, signer := signingSeed(t)
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	botAddr, opsAddr := freeAddr(t), freeAddr(t)
	const secret = "test-signing-secret"
	channel := "C0" + strings.ToUpper(name) + "0001"
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
agent:
  source: mgmt-%s
  kubeconfig: %s
  listen: %q
  leaderElection: {namespace: %s}
%sbot:
  listen: %q
  opsListen: %q
  groupWait: 0s
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
approvals:
%s  signingKeyFile: %s
`, srv.ClientURL(), name, kubeconfig, freeAddr(t), ns, agent(signer), botAddr, opsAddr, channel, rec.APIURL(), approvals, seed)
	logs := startMode(t, "all", cfg, map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-test", "TEST_SLACK_SIGNING_SECRET": secret, "POD_NAME": name + "-0"})
	waitReady(t, opsAddr)
	return &slashCommander{t: t, url: "http://" + botAddr + "/slack/commands", secret: secret, channel: channel, rec: rec}, logs
}

// signingSeed writes a new approval signing key (an nkey user seed) to a
// file and returns its path and public key.
func signingSeed(t *testing.T) (path, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ = kp.PublicKey()
	path = filepath.Join(t.TempDir(), "signing.seed")
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, pub
}
