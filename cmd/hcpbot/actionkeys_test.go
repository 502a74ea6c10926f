package main

import (
	"context"
	"fmt"
	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
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
// single approver's fix is refused; so is one with agent.approvers naming
// someone else, and one approval where agent.requiredApprovals asks for
// two. Either way the HostedCluster is unchanged and the outcome says why.
func TestAllAgentEnforcesConfiguredKeys(t *testing.T) {
	env.Need(t)
	for _, tc := range []struct {
		name     string
		agent    func(signer, other string) string // extra agent settings
		approver string                            // who approves U0KEYS0001's proposal
		want     string
	}{
		{"untrusted signing key", func(_, other string) string { return "  trustedKeys: [" + other + "]\n" }, "U0KEYS0002", "not trusted"},
		// The bot allows self-approval (fourEyes: false); the agent not.
		{"agent requires four-eyes", func(signer, _ string) string {
			return "  trustedKeys: [" + signer + "]\n  requireFourEyes: true\n"
		}, "U0KEYS0001", "four-eyes"},
		// The bot accepts U0KEYS0002; the agent lists only someone else.
		{"agent lists its approvers", func(signer, _ string) string {
			return "  trustedKeys: [" + signer + "]\n  approvers: [U0KEYS0009]\n"
		}, "U0KEYS0002", "not an approver this agent accepts"},
		// The bot needs one approval; the agent two.
		{"agent requires two approvals", func(signer, _ string) string {
			return "  trustedKeys: [" + signer + "]\n  requiredApprovals: 2\n"
		}, "U0KEYS0002", "has 1 of the 2 approvals it needs"},
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
			reply := hcp.run(ctx, "approve "+id, tc.approver, outcomeOf(id))
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

// allOptions change what startAllForActions starts with.
type allOptions struct {
	natsURL      string // "": a NATS server of its own
	seed, signer string // "": a fresh signing key
}

// startAllForActions starts `hcpbot all` (source mgmt-<name>) on the
// management cluster of kubeconfig, with a fresh approval signing key:
// agent(signer) adds agent settings, approvals holds the approvals
// section's other settings. It returns the signed /hcp sender, ready.
func startAllForActions(t *testing.T, name, ns, kubeconfig string, agent func(signer string) string, approvals string, opts ...func(*allOptions)) (*slashCommander, *syncbuf.Buffer) {
	t.Helper()
	var o allOptions
	for _, opt := range opts {
		opt(&o)
	}
	seed, signer := o.seed, o.signer
	if seed == "" {
		seed, signer = signingSeed(t)
	}
	if o.natsURL == "" {
		o.natsURL = natstest.RunServer(t).ClientURL()
	}
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
`, o.natsURL, name, kubeconfig, freeAddr(t), ns, agent(signer), botAddr, opsAddr, channel, rec.APIURL(), approvals, seed)
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

// outcomeOf accepts the outcome of action id posted after the immediate
// answer to its approval (approval's loop, worded by command.Outcome):
// applied, not applied, refused, failed.
func outcomeOf(id string) func(string) bool {
	return func(s string) bool {
		return strings.Contains(s, id) && !strings.Contains(s, "sent to the agent") && !strings.Contains(s, "more approver")
	}
}

// approvals.required: two people besides the requester must approve; the
// first approval changes nothing and says "1 of 2". agent.actionAckWait:
// the agent's consumer waits that long before handing a request to the
// next leader.
func TestAllRequiredApprovals(t *testing.T) {
	ctx := context.Background()
	ns, hosted, nodes, kubeconfig := allCluster(t, "twice")
	srv := natstest.RunServer(t)
	hcp, logs := startAllForActions(t, "twice", ns, kubeconfig, func(signer string) string { return "  actionAckWait: 7s\n" },
		"  approvers: [U0TWICE001, U0TWICE002, U0TWICE003]\n  required: 2\n", func(o *allOptions) { o.natsURL = srv.ClientURL() })
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	var id string
	testenv.Eventually(t, 60*time.Second, "noProxy fix proposed", func() bool {
		reply := hcp.run(ctx, "fix noproxy "+ns+"/twice", "U0TWICE001", func(s string) bool {
			return actionIDPattern.MatchString(s) || strings.Contains(s, "No noProxy fix") || strings.Contains(s, "Unknown cluster")
		})
		id = actionIDPattern.FindString(reply)
		return id != ""
	})
	if reply := hcp.run(ctx, "approve "+id, "U0TWICE002", func(s string) bool { return strings.Contains(s, id) }); !strings.Contains(reply, "(1 of 2 approvals)") {
		t.Fatalf("first approval: %q", reply)
	}
	if got := hcNoProxy(t, ns, "twice"); got != scenario.SeedNoProxy {
		t.Fatalf("one approval of two changed noProxy to %q", got)
	}
	if reply := hcp.run(ctx, "approve "+id, "U0TWICE003", outcomeOf(id)); !strings.Contains(reply, "and applied") {
		t.Fatalf("second approval: %q\n%s", reply, tail(logs.String(), 3000))
	}
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	name, _ := wire.ConsumerName("mgmt-twice")
	c, err := conn.JS.Consumer(ctx, bus.ActionsStreamName, name)
	if err != nil || c.CachedInfo().Config.AckWait != 7*time.Second {
		t.Errorf("the agent's consumer %s: %v, ack wait %v; want 7s (agent.actionAckWait)", name, err, c)
	}
}

// approvals.trustedKeys: after a key rotation, a proposal sealed with the
// previous key is approved by the bot that signs with the new one and
// runs on the agent that trusts both.
func TestAllTrustsRotatedKey(t *testing.T) {
	ctx := context.Background()
	ns, _, _, kubeconfig := allCluster(t, "rotated")
	srv := natstest.RunServer(t)
	oldSeed, oldPub := signingSeed(t)
	newSeed, newPub := signingSeed(t)
	// The bot before the rotation proposed the fix.
	b, err := os.ReadFile(oldSeed)
	if err != nil {
		t.Fatal(err)
	}
	old, err := approval.NewSigner(b)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	trail, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	before, err := approval.NewFlow(ctx, conn.JS, approval.Config{Signer: old, Trail: trail, Log: natstest.Logger(t),
		Policy: approval.Policy{Approvers: []string{"U0ROTATE01", "U0ROTATE02"}, FourEyes: true}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := before.Propose(ctx, actions.Change{Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: ns, Name: "rotated"},
		NoProxy: &actions.NoProxyParams{Expected: scenario.SeedNoProxy, Add: []string{"kubernetes"}}}, "U0ROTATE01", approval.ForSource("mgmt-rotated"))
	if err != nil {
		t.Fatal(err)
	}
	hcp, logs := startAllForActions(t, "rotated", ns, kubeconfig, func(string) string { return "  trustedKeys: [" + oldPub + ", " + newPub + "]\n" },
		"  approvers: [U0ROTATE01, U0ROTATE02]\n  trustedKeys: ["+oldPub+"]\n",
		func(o *allOptions) { o.natsURL, o.seed, o.signer = srv.ClientURL(), newSeed, newPub })
	if reply := hcp.run(ctx, "approve "+p.ID, "U0ROTATE02", outcomeOf(p.ID)); !strings.Contains(reply, "and applied") {
		t.Fatalf("approval after the rotation: %q\n%s", reply, tail(logs.String(), 3000))
	}
	if got := hcNoProxy(t, ns, "rotated"); got != scenario.SeedNoProxy+",kubernetes" {
		t.Errorf("noProxy = %q", got)
	}
}

func hcNoProxy(t *testing.T, ns, name string) string {
	t.Helper()
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
	return got
}
