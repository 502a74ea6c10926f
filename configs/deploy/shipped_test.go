package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/controlplane"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// The deployment as shipped, run: configs/deploy rendered with kustomize
// and applied to the real API server; the Secrets created and nkeys.env
// and the agent's settings filled in as README.md says (with keys from
// `hcpbot keygen` and certificates made here); then every pod of the
// rendered StatefulSet and Deployments started as a process with exactly
// its args, environment and files as the kubelet would give them, read
// back from the API server — 3 nats-server processes of go.mod's version
// forming the TLS cluster with nkey users, 2 agents authenticated by their
// ServiceAccount's token, 2 bots. Only what names the pod's world is
// remapped: mount paths into a folder per pod, container ports to free
// loopback ports, the cluster DNS names of the Services to 127.0.0.1 (and
// Slack's API to the recorder). Seed 000 then goes through it end to end:
// the incident posted to Slack, the fix approved by two people with signed
// button presses, the HostedCluster patched by the agent under its own
// RBAC.
func TestDeployAsShipped(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	started := time.Now()
	natsBin := natstest.ServerBinary(t)
	hcpbotBin := buildHcpbot(t)
	t.Logf("binaries ready after %v", time.Since(started).Round(time.Millisecond))

	// The seed 000 cluster, in HyperShift's namespace, which agent/clusters binds.
	c := scenario.BehindProxy(hcNamespace, "shipped")
	hosted := env.HostedCluster(t, c)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, c.Name+"-np", 1)
	if err != nil {
		t.Fatal(err)
	}
	deploy(t)
	actAsApprovers(t, hcpbotBin)
	// A Lease left by an earlier test's agent would only delay the election.
	if err := env.Kube.CoordinationV1().Leases(namespace).Delete(ctx, "hcpbot-agent", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	// What the operator creates (README.md): keys, certificates, Secrets,
	// nkeys.env and the agent's settings.
	ops := t.TempDir()
	keygen := func(name string) (seedFile, public string) {
		seedFile = filepath.Join(ops, name+".seed")
		out, err := exec.Command(hcpbotBin, "keygen", "--out", seedFile).Output()
		if err != nil {
			t.Fatalf("hcpbot keygen: %v", err)
		}
		return seedFile, strings.TrimSpace(string(out))
	}
	botSeed, botPub := keygen("bot")
	agentSeed, agentPub := keygen("agent-mgmt-1")
	signingSeed, signingPub := keygen("signing")
	natstest.WriteTLS(t, ops)
	file := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(ops, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rd := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const botToken, signingSecret = "xoxb-0000-shipped", "shipped-signing-secret"
	for name, data := range map[string]map[string][]byte{
		"nats-tls":           {"tls.crt": file(natstest.TLSCert), "tls.key": file(natstest.TLSKey), "ca.crt": file(natstest.TLSCA)},
		"hcpbot-slack":       {"bot-token": []byte(botToken), "signing-secret": []byte(signingSecret)},
		"hcpbot-bot-nats":    {"nkey.seed": rd(botSeed), "ca.crt": file(natstest.TLSCA)},
		"hcpbot-agent-nats":  {"nkey.seed": rd(agentSeed), "ca.crt": file(natstest.TLSCA)},
		"hcpbot-signing-key": {"seed": rd(signingSeed)},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: data}
		if _, err := env.Kube.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Kube.CoreV1().Secrets(namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	nats := as[appsv1.StatefulSet](t, get(t, "apps/v1", "StatefulSet", "nats"))
	agent := as[appsv1.Deployment](t, get(t, "apps/v1", "Deployment", "hcpbot-agent"))
	bot := as[appsv1.Deployment](t, get(t, "apps/v1", "Deployment", "hcpbot-bot"))
	editConfigMap(t, envFromConfigMap(t, nats.Spec.Template.Spec), map[string]string{
		"HCPBOT_BOT_NKEY": botPub, "HCPBOT_AGENT_MGMT_1_NKEY": agentPub,
	})
	editConfigMap(t, configMapOfEnv(t, agent.Spec.Template.Spec, "HCPBOT_TRUSTED_KEYS"), map[string]string{"trustedKeys": signingPub})

	// The images are the binaries run here.
	checkImage(t, nats.Spec.Template.Spec, "nats:"+strings.TrimPrefix(serverVersion(t, natsBin), "v")+"-alpine")

	// NATS: one process per StatefulSet pod, each its own ports.
	type natsPorts struct{ client, cluster, monitor int }
	var ports []natsPorts
	for range *nats.Spec.Replicas {
		ports = append(ports, natsPorts{freePort(t), freePort(t), freePort(t)})
	}
	var clientURLs []string
	// The Services' DNS names, never dialled: the headless Service per pod
	// (routes, advertise) and the client name.
	var dns []string
	for i, p := range ports {
		clientURLs = append(clientURLs, fmt.Sprintf("tls://127.0.0.1:%d", p.client))
		host := fmt.Sprintf("%s-%d.%s.%s.svc", nats.Name, i, nats.Spec.ServiceName, namespace)
		dns = append(dns, host+":6222", fmt.Sprintf("127.0.0.1:%d", p.cluster), host, fmt.Sprintf("127.0.0.1:%d", p.cluster))
	}
	dns = append(dns, "tls://nats."+namespace+".svc:4222", strings.Join(clientURLs, ", "))
	var natsPods []*podProc
	for i, p := range ports {
		pod := kubelet(t, nats.Spec.Template.Spec, fmt.Sprintf("%s-%d", nats.Name, i), dns, map[int32]int{4222: p.client, 6222: p.cluster, 8222: p.monitor})
		// The rendered config must now name loopback only: nothing that
		// would be dialled (routes, advertise) names a cluster host.
		opts, err := pod.natsOptions(t)
		if err != nil {
			t.Fatalf("%s: nats.conf: %v", pod.name, err)
		}
		if opts.TLSConfig == nil || opts.Cluster.TLSConfig == nil || len(opts.Nkeys) != 2 || len(opts.Routes) != len(ports) {
			t.Fatalf("%s: TLS %v, route TLS %v, %d nkey users, %d routes", pod.name, opts.TLSConfig != nil, opts.Cluster.TLSConfig != nil, len(opts.Nkeys), len(opts.Routes))
		}
		for _, r := range opts.Routes {
			if r.Hostname() != "127.0.0.1" {
				t.Fatalf("%s: route %s is not loopback", pod.name, r)
			}
		}
		if h, _, _ := net.SplitHostPort(opts.Cluster.Advertise); h != "127.0.0.1" {
			t.Fatalf("%s: cluster advertise %q is not loopback", pod.name, opts.Cluster.Advertise)
		}
		pod.start(t, natsBin)
		natsPods = append(natsPods, pod)
	}
	for _, pod := range natsPods {
		pod.waitProbe(t, pod.container.StartupProbe, 2*time.Minute)
	}
	t.Logf("NATS cluster up after %v", time.Since(started).Round(time.Millisecond))

	// The bots and the agents, as many as the Deployments ask for.
	rec := slackrec.New(t)
	botDNS := append(slices.Clone(dns), "slack:\n", "slack:\n  # remapped: Slack's Web API is the test's recorder\n  apiURL: "+strconv.Quote(rec.APIURL())+"\n")
	checkImage(t, bot.Spec.Template.Spec, "ghcr.io/hcpbot/hcpbot:"+releaseTag(t))
	checkImage(t, agent.Spec.Template.Spec, "ghcr.io/hcpbot/hcpbot:"+releaseTag(t))
	var bots, agents []*podProc
	for i := range *bot.Spec.Replicas {
		pod := kubelet(t, bot.Spec.Template.Spec, fmt.Sprintf("%s-7c9d8-%d", bot.Name, i), botDNS, map[int32]int{8081: freePort(t), 8082: freePort(t)})
		pod.start(t, hcpbotBin)
		bots = append(bots, pod)
	}
	for i := range *agent.Spec.Replicas {
		pod := kubelet(t, agent.Spec.Template.Spec, fmt.Sprintf("%s-5f6b7-%d", agent.Name, i), dns, map[int32]int{8080: freePort(t)})
		pod.start(t, hcpbotBin)
		agents = append(agents, pod)
	}
	for _, pod := range append(slices.Clone(bots), agents...) {
		pod.waitProbe(t, pod.container.ReadinessProbe, 3*time.Minute)
	}
	t.Logf("bots and agents ready after %v", time.Since(started).Round(time.Millisecond))
	var holder string
	testenv.Eventually(t, 60*time.Second, "an agent replica holding Lease hcpbot/hcpbot-agent", func() bool {
		l, err := env.Kube.CoordinationV1().Leases(namespace).Get(ctx, "hcpbot-agent", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return slices.ContainsFunc(agents, func(p *podProc) bool { return p.name == holder })
	})

	// Seed 000: a node of the cluster behind the proxy stops reporting.
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "NodeStatusUnknown", "Kubelet stopped posting node status."); err != nil {
		t.Fatal(err)
	}
	cfg := botConfig(t, bots[0])
	channel := cfg["bot"].(map[string]any)["defaultChannel"].(string)
	approvers := cfg["approvals"].(map[string]any)["approvers"].([]any)
	var incident slackrec.Message
	var key string
	rec.WaitFor(t, 3*time.Minute, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, c.Namespace+"/"+c.Name) {
				if v := buttonValue(m.Blocks, blockkit.ActionApprove); v != "" {
					incident, key = m, v
					return true
				}
			}
		}
		return false
	})
	t.Logf("seed 000 incident posted after %v: %s", time.Since(started).Round(time.Millisecond), incident.Text)

	// Four-eyes (bot/config.yaml): two approvers press Approve.
	slackURL := "http://" + bots[0].addr(t, "slack")
	press := func(n int, user string, done func(string) bool) string {
		rch := fmt.Sprintf("R%s%d", channel, n)
		payload := slackrec.ButtonPress(slackrec.Press{UserID: user, UserName: strings.ToLower(user), ActionID: blockkit.ActionApprove,
			BlockID: "decide-" + key, Value: key, ResponseURL: rec.ResponseURL(rch), Message: &incident})
		req, err := slackrec.InteractionRequest(ctx, slackURL+chatops.ActionsPath, signingSecret, payload, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("press by %s: status %d", user, resp.StatusCode)
		}
		return rec.WaitResponse(t, 2*time.Minute, rch, done)
	}
	first, second := approvers[0].(string), approvers[1].(string)
	press(1, first, func(s string) bool { return strings.Contains(s, "1 of 2") })
	if got := noProxy(t, c); got != scenario.SeedNoProxy {
		t.Fatalf("one approval changed noProxy to %q", got)
	}
	// The answer comes at once; the outcome follows in the same
	// conversation.
	reply := press(2, second, func(s string) bool {
		return strings.Contains(s, "and applied") || strings.Contains(s, "not applied") || strings.Contains(s, "failed")
	})
	t.Logf("approved: %s", reply)
	got := noProxy(t, c)
	entries := strings.Split(got, ",")
	for _, want := range append([]string{"kubernetes"}, hypershift.CIDRs(hosted.Object.Spec.Networking.ServiceNetwork)...) {
		if !slices.Contains(entries, want) {
			t.Errorf("noProxy %q lacks %q", got, want)
		}
	}
	if !strings.HasPrefix(got, scenario.SeedNoProxy+",") {
		t.Errorf("noProxy %q does not keep the earlier entries %q", got, scenario.SeedNoProxy)
	}
	// Written as the approver who completed the decision (identities
	// of agent/config.yaml), as the API server's audit log shows.
	want := map[string]string{"U01234ABCD": "alice", "U05678EFGH": "bob"}[second]
	testenv.Eventually(t, 10*time.Second, "the fix's patch as "+want+" in the audit log", func() bool {
		evs, err := controlplane.AuditEvents(env.CP.Management.AuditLogPath())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(evs, func(e controlplane.AuditEvent) bool {
			return e.Verb == "patch" && e.User.Username == testenv.AgentUser && e.ImpersonatedUser != nil && e.ImpersonatedUser.Username == want &&
				e.ObjectRef != nil && e.ObjectRef.Resource == "hostedclusters" && e.ObjectRef.Name == c.Name &&
				e.ResponseStatus != nil && e.ResponseStatus.Code == 200 && !strings.Contains(e.RequestURI, "dryRun=")
		})
	})
	t.Logf("seed 000 fixed end to end after %v", time.Since(started).Round(time.Millisecond))

	// No secret reached a log; nothing the agent needs was refused.
	for _, pod := range append(append(slices.Clone(natsPods), bots...), agents...) {
		// Restarts are what the kubelet does; shown with their reasons. A
		// bot does not exit on a fresh NATS cluster: it retries ensuring
		// its streams and buckets, two replicas creating the same ones at
		// once included (bus.EnsureStream), so it never restarts here.
		if n := pod.restarts.Load(); n > 0 {
			report := t.Logf
			if slices.Contains(bots, pod) {
				report = t.Errorf
			}
			report("%s restarted %d times; why:\n%s", pod.name, n, exitReasons(pod.logs(t)))
		}
		logs := pod.logs(t)
		for _, secret := range []string{botToken, signingSecret, strings.TrimSpace(string(rd(botSeed))), strings.TrimSpace(string(rd(agentSeed))), strings.TrimSpace(string(rd(signingSeed))), pod.saToken} {
			if secret != "" && strings.Contains(logs, secret) {
				t.Errorf("%s: a secret reached the log", pod.name)
			}
		}
		if strings.Contains(strings.ToLower(logs), "forbidden") {
			t.Errorf("%s was refused something:\n%s", pod.name, tail(logs, 3000))
		}
	}
}

// actAsApprovers does what README.md asks of an operator whose
// configuration maps identities: apply the impersonation grant `hcpbot
// rbac` prints from the agent's config.yaml, and give the mapped people
// (alice, bob) the right to patch the HostedClusters of clusters, as a
// cluster administrator would. Without it, the shipped configuration
// (identities.required) runs nothing.
func actAsApprovers(t *testing.T, hcpbotBin string) {
	t.Helper()
	out, err := exec.Command(hcpbotBin, "rbac", "--config", "agent/config.yaml").Output()
	if err != nil {
		t.Fatalf("hcpbot rbac: %v", err)
	}
	docs := strings.Split(string(out), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("hcpbot rbac printed:\n%s", out)
	}
	for _, doc := range docs {
		env.ApplyRBAC(t, []byte(doc), "")
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, actions.ImpersonationRoleName, metav1.DeleteOptions{})
		_ = env.Kube.RbacV1().ClusterRoles().Delete(ctx, actions.ImpersonationRoleName, metav1.DeleteOptions{})
	})
	for _, user := range []string{"alice", "bob"} {
		t.Cleanup(env.Grant(t, hcNamespace, user, hypershift.HostedClusterGVR.Group, "hostedclusters", "patch"))
	}
}

// exitReasons keeps the lines of a log that say why the process exited:
// the last line before each restart.
func exitReasons(log string) string {
	var out []string
	lines := strings.Split(log, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "[test kubelet]") {
			for j := i - 1; j >= 0; j-- {
				if strings.TrimSpace(lines[j]) != "" {
					out = append(out, "  "+lines[j])
					break
				}
			}
		}
	}
	return strings.Join(out, "\n")
}

// buildHcpbot builds the hcpbot binary the images hold.
func buildHcpbot(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hcpbot")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/hcpbot/hcpbot/cmd/hcpbot")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// serverVersion is what `nats-server --version` says, e.g. "v2.15.2".
func serverVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "nats-server:"))
	if v != "v"+natsserver.VERSION {
		t.Errorf("nats-server binary %s, the embedded server %s", v, natsserver.VERSION)
	}
	return v
}

func checkImage(t *testing.T, spec corev1.PodSpec, want string) {
	t.Helper()
	if got := spec.Containers[0].Image; got != want {
		t.Errorf("image %q, want %q", got, want)
	}
}

// get reads a deployed object back from the API server: what the kubelet
// would run, defaults included.
func get(t *testing.T, apiVersion, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	ri, err := newApplier().resource(u)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ri.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// editConfigMap sets keys of a deployed ConfigMap, as re-applying the
// kustomization with the edited file would.
func editConfigMap(t *testing.T, name string, set map[string]string) {
	t.Helper()
	ctx := context.Background()
	cm, err := env.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		if _, ok := cm.Data[k]; !ok {
			t.Fatalf("ConfigMap %s has no key %s to fill in", name, k)
		}
		cm.Data[k] = v
	}
	if _, err := env.Kube.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func envFromConfigMap(t *testing.T, spec corev1.PodSpec) string {
	t.Helper()
	for _, e := range spec.Containers[0].EnvFrom {
		if e.ConfigMapRef != nil {
			return e.ConfigMapRef.Name
		}
	}
	t.Fatal("no envFrom ConfigMap")
	return ""
}

func configMapOfEnv(t *testing.T, spec corev1.PodSpec, name string) string {
	t.Helper()
	for _, e := range spec.Containers[0].Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			return e.ValueFrom.ConfigMapKeyRef.Name
		}
	}
	t.Fatalf("env %s is not from a ConfigMap", name)
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// podProc is one pod's container run as a process: its file system is a
// folder (root) holding the mounts at their paths.
type podProc struct {
	name      string
	root      string
	container corev1.Container
	args      []string
	env       []string
	ports     map[int32]int // container port → loopback port
	saToken   string
	logPath   string
	restarts  atomic.Int32
}

// kubelet prepares container 0 of spec as pod name, as the kubelet does:
// each volume mount materialised from its ConfigMap or Secret as read from
// the API server (emptyDir and claims as empty folders), the ServiceAccount
// token if automounted, the environment resolved (values with $(VAR)
// references, ConfigMap keys, the downward API, envFrom) and the args
// expanded. Then only the pod's world is remapped in args, environment and
// ConfigMap files: the mount paths into the pod's folder, the container
// ports (0.0.0.0:P and :P) to the given loopback ports, and the pairs of
// remap (the Services' DNS names). Secret files are written as they are.
func kubelet(t *testing.T, spec corev1.PodSpec, name string, remap []string, ports map[int32]int) *podProc {
	t.Helper()
	ctx := context.Background()
	p := &podProc{name: name, root: t.TempDir(), container: spec.Containers[0], ports: ports}
	c := p.container
	pairs := slices.Clone(remap)
	for _, cp := range c.Ports {
		lo, ok := ports[cp.ContainerPort]
		if !ok {
			t.Fatalf("%s: container port %d (%s) has no loopback port", name, cp.ContainerPort, cp.Name)
		}
		to := fmt.Sprintf("127.0.0.1:%d", lo)
		pairs = append(pairs, fmt.Sprintf("0.0.0.0:%d", cp.ContainerPort), to, fmt.Sprintf(":%d", cp.ContainerPort), to)
	}
	for _, m := range c.VolumeMounts {
		pairs = append(pairs, m.MountPath+"/", p.root+m.MountPath+"/")
	}
	for _, m := range c.VolumeMounts {
		pairs = append(pairs, m.MountPath, p.root+m.MountPath)
	}
	r := strings.NewReplacer(pairs...)

	for _, m := range c.VolumeMounts {
		dir := filepath.Join(p.root, m.MountPath)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			continue // a volumeClaimTemplate: an empty volume
		}
		switch v := spec.Volumes[i]; {
		case v.ConfigMap != nil:
			cm, err := env.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: volume %s: %v", name, v.Name, err)
			}
			for k, data := range cm.Data {
				data = r.Replace(data)
				if strings.Contains(data, ".svc") || strings.Contains(data, "0.0.0.0") {
					t.Fatalf("%s: %s of ConfigMap %s still names the cluster's network:\n%s", name, k, cm.Name, data)
				}
				writeFile(t, filepath.Join(dir, k), []byte(data))
			}
		case v.Secret != nil:
			s, err := env.Kube.CoreV1().Secrets(namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: volume %s: %v", name, v.Name, err)
			}
			for k, data := range s.Data {
				writeFile(t, filepath.Join(dir, k), data)
			}
		case v.EmptyDir != nil:
		default:
			t.Fatalf("%s: volume %s: a kind this kubelet does not know", name, v.Name)
		}
	}

	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Fatalf("%s: envFrom %+v", name, ef)
		}
		cm, err := env.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range cm.Data {
			set(ef.Prefix+k, v)
		}
	}
	expand := func(s string) string {
		return os.Expand(strings.NewReplacer("$(", "${", ")", "}").Replace(s), func(k string) string { return vars[k] })
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value))
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := env.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				t.Fatalf("%s: env %s: ConfigMap %s has no key %s", name, e.Name, ref.Name, ref.Key)
			}
			set(e.Name, v)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				set(e.Name, name)
			case "metadata.namespace":
				set(e.Name, namespace)
			default:
				t.Fatalf("%s: env %s: field %s", name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			t.Fatalf("%s: env %s: a source this kubelet does not know", name, e.Name)
		}
	}
	for _, k := range order {
		p.env = append(p.env, k+"="+r.Replace(vars[k]))
	}
	// What the kubelet adds (not remapped: these name the pod's folder).
	p.env = append(p.env, "HOSTNAME="+name)
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.mountServiceAccount(t, spec.ServiceAccountName)
		p.env = append(p.env, "KUBECONFIG="+filepath.Join(p.root, "kubeconfig"))
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		p.args = append(p.args, r.Replace(expand(a)))
	}
	// Nothing left that names the cluster's network.
	for _, s := range append(slices.Clone(p.args), p.env...) {
		if strings.Contains(s, ".svc") || strings.Contains(s, "0.0.0.0") {
			t.Fatalf("%s: %q still names the cluster's network", name, s)
		}
	}
	return p
}

// mountServiceAccount gives the pod its ServiceAccount's token, CA and
// namespace where the kubelet projects them. client-go's in-cluster
// configuration reads that fixed path and KUBERNETES_SERVICE_HOST, which
// a process outside a pod cannot have; the same three files are handed to
// it through KUBECONFIG instead: the one path remapped this way.
func (p *podProc) mountServiceAccount(t *testing.T, sa string) {
	t.Helper()
	ctx := context.Background()
	exp := int64(3600)
	tr, err := env.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s: token of ServiceAccount %s: %v", p.name, sa, err)
	}
	p.saToken = tr.Status.Token
	dir := filepath.Join(p.root, "var/run/secrets/kubernetes.io/serviceaccount")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "token"), []byte(p.saToken))
	writeFile(t, filepath.Join(dir, "ca.crt"), env.Config.CAData)
	writeFile(t, filepath.Join(dir, "namespace"), []byte(namespace))
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster: {server: %q, certificate-authority: %q}
users:
- name: serviceaccount
  user: {tokenFile: %q}
contexts:
- name: in-cluster
  context: {cluster: in-cluster, user: serviceaccount, namespace: %q}
current-context: in-cluster
`, env.Config.Host, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token"), namespace)
	writeFile(t, filepath.Join(p.root, "kubeconfig"), []byte(kubeconfig))
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// natsOptions parses the pod's nats.conf (--config) with the pod's
// environment, as nats-server will.
func (p *podProc) natsOptions(t *testing.T) (*natsserver.Options, error) {
	t.Helper()
	i := slices.Index(p.args, "--config")
	if i < 0 || i+1 >= len(p.args) {
		return nil, fmt.Errorf("no --config in %q", p.args)
	}
	for _, kv := range p.env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return natsserver.ProcessConfigFile(p.args[i+1])
}

// start runs the container's process with exactly the pod's args and
// environment (nothing inherited from the test), in its folder, until the
// test ends; then SIGTERM, and SIGKILL after 30s. Like the kubelet with
// restartPolicy Always (a Deployment's and a StatefulSet's), it starts
// the process again when it exits, after a doubling back-off (from 1s, at
// most 10s: the kubelet's 10s to 5m, shortened), and counts the restarts.
func (p *podProc) start(t *testing.T, bin string) {
	t.Helper()
	p.logPath = filepath.Join(p.root, "container.log")
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	stopped := make(chan struct{})
	run := func() (*exec.Cmd, chan struct{}, error) {
		cmd := exec.Command(bin, p.args...)
		cmd.Env, cmd.Dir = p.env, p.root
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		return cmd, exited, nil
	}
	cmd, exited, err := run()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(stopped)
		backoff := time.Second
		for {
			select {
			case <-stop:
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					fmt.Fprintf(logf, "\n[test kubelet] %s did not stop within 30s of SIGTERM: killed\n", p.name)
					_ = cmd.Process.Kill()
					<-exited
				}
				return
			case <-exited:
			}
			fmt.Fprintf(logf, "\n[test kubelet] %s exited (%v); restarting in %v\n", p.name, cmd.ProcessState, backoff)
			select {
			case <-stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			if cmd, exited, err = run(); err != nil {
				fmt.Fprintf(logf, "\n[test kubelet] %s: %v\n", p.name, err)
				return
			}
			p.restarts.Add(1)
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-stopped
		logf.Close()
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", p.name, tail(p.logs(t), 4000))
		}
	})
}

func (p *podProc) logs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// addr is the loopback address of the container port named port.
func (p *podProc) addr(t *testing.T, port string) string {
	t.Helper()
	return p.target(t, intstr.FromString(port))
}

func (p *podProc) target(t *testing.T, port intstr.IntOrString) string {
	t.Helper()
	for _, cp := range p.container.Ports {
		if port.Type == intstr.String && cp.Name == port.StrVal || port.Type == intstr.Int && cp.ContainerPort == port.IntVal {
			return fmt.Sprintf("127.0.0.1:%d", p.ports[cp.ContainerPort])
		}
	}
	t.Fatalf("%s: no container port %s", p.name, port.String())
	return ""
}

// waitProbe runs the HTTP probe as the kubelet does until it passes; the
// process must not exit meanwhile.
func (p *podProc) waitProbe(t *testing.T, probe *corev1.Probe, timeout time.Duration) {
	t.Helper()
	if probe == nil || probe.HTTPGet == nil {
		t.Fatalf("%s: no HTTP probe", p.name)
	}
	url := "http://" + p.target(t, probe.HTTPGet.Port) + probe.HTTPGet.Path
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 400 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not pass within %v (last: %v); log:\n%s", p.name, url, timeout, err, tail(p.logs(t), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// botConfig is the bot's config file as the pod has it.
func botConfig(t *testing.T, p *podProc) map[string]any {
	t.Helper()
	var path string
	for _, a := range p.args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			path = v
		}
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(readFileT(t, path), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buttonValue finds the value of the button action in Block Kit JSON.
func buttonValue(blocks json.RawMessage, action string) string {
	var v any
	if err := json.Unmarshal(blocks, &v); err != nil {
		return ""
	}
	var walk func(v any) string
	walk = func(v any) string {
		switch x := v.(type) {
		case map[string]any:
			if x["action_id"] == action {
				if s, ok := x["value"].(string); ok {
					return s
				}
			}
			for _, e := range x {
				if s := walk(e); s != "" {
					return s
				}
			}
		case []any:
			for _, e := range x {
				if s := walk(e); s != "" {
					return s
				}
			}
		}
		return ""
	}
	return walk(v)
}

func noProxy(t *testing.T, c scenario.Cluster) string {
	t.Helper()
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
	return v
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
