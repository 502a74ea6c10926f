package deploy_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/logging"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/hcpbot/hcpbot/watchers"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const (
	namespace = "hcpbot"
	agentSA   = "hcpbot-agent"
	agentUser = "system:serviceaccount:" + namespace + ":" + agentSA
	// The HostedCluster namespace agent/rbac.yaml binds by default.
	hcNamespace = "clusters"
)

// render builds the kustomization in dir, as `kubectl apply -k` would.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	if len(out) == 0 {
		t.Fatalf("%s renders nothing", dir)
	}
	return out
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && (o.GetName() == name || strings.HasPrefix(o.GetName(), name+"-") && kind == "ConfigMap") {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

// checkPod holds for every workload: non-root, read-only root file system,
// no privilege escalation, no capabilities, probes on the ops endpoints,
// resources set.
func checkPod(t *testing.T, name string, spec corev1.PodSpec, probes bool) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
		t.Errorf("%s: pod securityContext %+v: want runAsNonRoot and a seccomp profile", name, psc)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s/%s: container securityContext %+v", name, c.Name, sc)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
			t.Errorf("%s/%s: resources %+v", name, c.Name, c.Resources)
		}
		if !probes {
			continue
		}
		if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
			t.Errorf("%s/%s: liveness probe %+v, want GET /healthz", name, c.Name, p)
		}
		if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
			t.Errorf("%s/%s: readiness probe %+v, want GET /readyz", name, c.Name, p)
		}
	}
}

// secretLike matches credentials that must never be in a manifest: Slack
// tokens, NATS nkey seeds and JWTs, PEM keys, passwords in URLs.
var secretLike = regexp.MustCompile(`xox[abposr]-|xapp-|\bS[UAO][A-Z2-7]{50,}|eyJ[A-Za-z0-9_-]{20,}\.|-----BEGIN|://[^/\s:@]+:[^/\s@]+@`)

// checkCommon holds for every kustomization: no Secret objects, nothing
// that looks like a credential, no wildcard in any RBAC rule.
func checkCommon(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			t.Errorf("Secret %s rendered: credentials are created out of band", o.GetName())
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if m := secretLike.Find(b); m != nil {
			t.Errorf("%s %s: looks like a credential in plain text: %q…", o.GetKind(), o.GetName(), m[:min(len(m), 8)])
		}
		var rules []rbacv1.PolicyRule
		switch o.GetKind() {
		case "ClusterRole":
			r := as[rbacv1.ClusterRole](t, o)
			if r.AggregationRule != nil {
				t.Errorf("ClusterRole %s aggregates", r.Name)
			}
			rules = r.Rules
		case "Role":
			rules = as[rbacv1.Role](t, o).Rules
		}
		for _, r := range rules {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
				for _, s := range list {
					if strings.Contains(s, "*") {
						t.Errorf("%s %s: wildcard in %+v", o.GetKind(), o.GetName(), r)
					}
				}
			}
			for _, v := range r.Verbs {
				if v == "escalate" || v == "bind" || strings.HasPrefix(v, "impersonate") || v == "deletecollection" {
					t.Errorf("%s %s: verb %s", o.GetKind(), o.GetName(), v)
				}
				// patch only for the noProxy fix (actions: a merge patch
				// carrying the resourceVersion), nowhere else.
				if v == "patch" && !slices.Equal(r.Resources, []string{"hostedclusters"}) && !(slices.Equal(r.Resources, []string{"proxies"}) && slices.Equal(r.ResourceNames, []string{"cluster"})) {
					t.Errorf("%s %s: patch on %v", o.GetKind(), o.GetName(), r.Resources)
				}
			}
			for _, res := range r.Resources {
				if strings.Contains(res, "/") {
					t.Errorf("%s %s: subresource %s", o.GetKind(), o.GetName(), res)
				}
			}
		}
		if o.GetKind() == "ClusterRoleBinding" {
			crb := as[rbacv1.ClusterRoleBinding](t, o)
			if crb.RoleRef.Name == "cluster-admin" {
				t.Errorf("ClusterRoleBinding %s to cluster-admin", crb.Name)
			}
		}
	}
}

func TestAgentManifests(t *testing.T) {
	objs := append(render(t, "agent"), render(t, "agent/clusters")...)
	checkCommon(t, objs)
	d := as[appsv1.Deployment](t, find(t, objs, "Deployment", "hcpbot-agent"))
	if d.Namespace != namespace || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("agent Deployment %s/%s replicas %v, want hcpbot and 2", d.Namespace, d.Name, d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != agentSA {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	checkPod(t, "agent", spec, true)
	c := spec.Containers[0]
	// No --stream-replicas: against the shipped NATS the agent never
	// creates the events stream (the bot owns it).
	if c.Image != "ghcr.io/hcpbot/hcpbot:"+releaseTag(t) || len(c.Args) == 0 || c.Args[0] != "agent" || !slices.Contains(c.Args, "--leader-elect") ||
		slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--stream-replicas") }) {
		t.Errorf("agent image %q args %q", c.Image, c.Args)
	}
	envs := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		envs[e.Name] = e
	}
	for name, field := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
		if e := envs[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("%s: %+v, want the downward API's %s", name, e, field)
		}
	}
	// Its config file (the identities) is the generated ConfigMap,
	// mounted where --config points.
	acm := find(t, objs, "ConfigMap", "hcpbot-agent-config")
	mountedConfig := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == acm.GetName() && slices.Contains(c.Args, "--config="+filepath.Join(m.MountPath, "config.yaml")) {
				mountedConfig = true
			}
		}
	}
	if !mountedConfig {
		t.Errorf("agent args %q: --config does not name config.yaml of ConfigMap %s as mounted", c.Args, acm.GetName())
	}
	cm := find(t, objs, "ConfigMap", "hcpbot-agent-settings")
	for _, name := range []string{"HCPBOT_SOURCE", "HCPBOT_NATS_URL", "HCPBOT_TRUSTED_KEYS"} {
		e := envs[name]
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil || e.ValueFrom.ConfigMapKeyRef.Name != cm.GetName() {
			t.Errorf("%s: %+v, want a key of ConfigMap %s (kustomize rewrites the hashed name)", name, e, cm.GetName())
		}
	}
	if src, _, _ := unstructured.NestedString(cm.Object, "data", "source"); event.ValidateSource(src) != nil {
		t.Errorf("source %q is not a valid event source", src)
	}
	// The NATS nkey seed and CA are files from a Secret, named by paths;
	// the URL is TLS.
	for _, name := range []string{"HCPBOT_NATS_NKEY_SEED", "HCPBOT_NATS_CA"} {
		if p := envs[name].Value; !mountedFromSecret(spec, c, p, "hcpbot-agent-nats") {
			t.Errorf("%s=%q is not a file mounted from Secret hcpbot-agent-nats", name, p)
		}
	}
	if u, _, _ := unstructured.NestedString(cm.Object, "data", "natsURL"); !strings.HasPrefix(u, "tls://") {
		t.Errorf("natsURL %q: want tls://", u)
	}
	if _, ok := envs["HCPBOT_NATS_CREDS"]; ok {
		t.Error("HCPBOT_NATS_CREDS set: the shipped NATS knows nkey users")
	}
	// Lease election needs the Lease's namespace: POD_NAMESPACE is the
	// default of --lease-namespace, and the Role lives there.
	role := as[rbacv1.Role](t, find(t, objs, "Role", "hcpbot-agent-leader-election"))
	if role.Namespace != d.Namespace {
		t.Errorf("leader election Role in %s, Deployment in %s", role.Namespace, d.Namespace)
	}
	// The Role names the Lease the agent uses. (kustomize rewrites
	// resourceNames that equal a generated ConfigMap's name: keep them
	// apart.)
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 && !slices.Equal(r.ResourceNames, []string{"hcpbot-agent"}) || !slices.Contains(c.Args, "--lease-name=hcpbot-agent") {
			t.Errorf("leader election rule %+v, args %q: want the Lease hcpbot-agent", r, c.Args)
		}
	}
	if find(t, objs, "PodDisruptionBudget", "hcpbot-agent") == nil || find(t, objs, "ValidatingAdmissionPolicyBinding", "hcpbot-agent-services") == nil ||
		find(t, objs, "ValidatingAdmissionPolicyBinding", "hcpbot-agent-events") == nil {
		t.Error("missing PDB or admission policy binding")
	}
	// Every subject of every binding is the agent's ServiceAccount.
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if len(subjects) != 1 || subjects[0].(map[string]any)["kind"] != "ServiceAccount" ||
			subjects[0].(map[string]any)["name"] != agentSA || subjects[0].(map[string]any)["namespace"] != namespace {
			t.Errorf("%s %s subjects %v", o.GetKind(), o.GetName(), subjects)
		}
	}
}

// mountedFromSecret reports whether path is a file of a volume of c that
// comes from the Secret secretName.
func mountedFromSecret(spec corev1.PodSpec, c corev1.Container, path, secretName string) bool {
	for _, m := range c.VolumeMounts {
		if filepath.Dir(path) != filepath.Clean(m.MountPath) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secretName {
				return true
			}
		}
	}
	return false
}

func TestBotManifests(t *testing.T) {
	objs := render(t, "bot")
	checkCommon(t, objs)
	d := as[appsv1.Deployment](t, find(t, objs, "Deployment", "hcpbot-bot"))
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("bot replicas %v, want 2", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	checkPod(t, "bot", spec, true)
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the bot needs no Kubernetes API token")
	}
	for _, o := range objs {
		if strings.Contains(o.GetKind(), "Role") {
			t.Errorf("bot has %s %s: it needs no Kubernetes permissions", o.GetKind(), o.GetName())
		}
	}
	c := spec.Containers[0]
	for _, e := range c.Env {
		if e.Value != "" && strings.Contains(strings.ToLower(e.Name), "token") {
			t.Errorf("env %s has a literal value", e.Name)
		}
	}
	// The config is the generated ConfigMap, mounted where --config points,
	// and it is valid as hcpbot reads it.
	cmObj := find(t, objs, "ConfigMap", "hcpbot-bot-config")
	data, _, _ := unstructured.NestedString(cmObj.Object, "data", "config.yaml")
	cfg, err := configs.Parse([]byte(data), "config.yaml")
	if err != nil {
		t.Fatalf("bot config: %v", err)
	}
	if cfg.Bot == nil || cfg.Slack == nil || cfg.Agent != nil || cfg.NATS.StreamReplicas != 3 || len(cfg.NATS.URLs) == 0 {
		t.Errorf("bot config: %+v", cfg)
	}
	// Production: changes only as a mapped identity, and every approver
	// the config lists is mapped, so each of them can complete a decision.
	if !cfg.Identities.Required {
		t.Error("bot config: identities.required is off; the shipped configuration acts only as the approver")
	}
	for _, a := range cfg.Approvals.Approvers {
		if _, _, err := cfg.Identities.For("any-cluster", a, nil, ""); err != nil {
			t.Errorf("approver %s has no identity: %v", a, err)
		}
	}
	// The agent reads the same identities (its config.yaml), or it would
	// act as itself while the bot says it acts as the approver.
	agentCM := find(t, render(t, "agent"), "ConfigMap", "hcpbot-agent-config")
	agentData, _, _ := unstructured.NestedString(agentCM.Object, "data", "config.yaml")
	agentCfg, err := configs.Parse([]byte(agentData), "config.yaml")
	if err != nil {
		t.Fatalf("agent config: %v", err)
	}
	if !reflect.DeepEqual(agentCfg.Identities, cfg.Identities) {
		t.Errorf("the agent's identities %+v differ from the bot's %+v", agentCfg.Identities, cfg.Identities)
	}
	var configPath string
	for _, a := range c.Args {
		if p, ok := strings.CutPrefix(a, "--config="); ok {
			configPath = p
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cmObj.GetName() && filepath.Join(m.MountPath, "config.yaml") == configPath {
				mounted = true
			}
		}
	}
	if c.Args[0] != "bot" || !mounted {
		t.Errorf("args %q: --config is not the mounted ConfigMap %s", c.Args, cmObj.GetName())
	}
	// Every secret the config names is a file mounted from a Secret.
	for what, ref := range map[string]configs.SecretRef{"bot token": cfg.Slack.BotToken, "signing secret": cfg.Slack.SigningSecret} {
		if ref.Env != "" || !mountedFromSecret(spec, c, ref.File, "hcpbot-slack") {
			t.Errorf("%s %+v: want a file mounted from Secret hcpbot-slack", what, ref)
		}
	}
	for what, p := range map[string]string{"nats.nkeySeedFile": cfg.NATS.NkeySeedFile, "nats.caFile": cfg.NATS.CAFile} {
		if !mountedFromSecret(spec, c, p, "hcpbot-bot-nats") {
			t.Errorf("%s %q: want a file mounted from Secret hcpbot-bot-nats", what, p)
		}
	}
	// The action-signing seed, which agents' trustedKeys name.
	if ref := cfg.Approvals.SigningKey; ref.Env != "" || !mountedFromSecret(spec, c, ref.File, "hcpbot-signing-key") {
		t.Errorf("approvals.signingKey %+v: want a file mounted from Secret hcpbot-signing-key", ref)
	}
	if cfg.NATS.Creds.IsSet() || !strings.HasPrefix(cfg.NATS.URLs[0], "tls://") {
		t.Errorf("bot NATS: creds %v, urls %v: want the nkey user and tls://", cfg.NATS.Creds, cfg.NATS.URLs)
	}
	// Two container ports, one per listener: slack (bot.listen) and ops
	// (bot.opsListen), and the probes on ops.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if len(c.Ports) != 2 || !strings.HasSuffix(cfg.Bot.Listen, ":8081") || ports["slack"] != 8081 ||
		!strings.HasSuffix(cfg.Bot.OpsListen, ":8082") || ports["ops"] != 8082 {
		t.Errorf("listen %q, opsListen %q, container ports %+v", cfg.Bot.Listen, cfg.Bot.OpsListen, c.Ports)
	}
	for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port != intstr.FromString("ops") {
			t.Errorf("%s probe %+v: want port ops", what, p)
		}
	}
	// The Service Slack's traffic reaches targets only the Slack port; the
	// metrics Service only ops; neither leaves the cluster by itself.
	for name, port := range map[string]string{"hcpbot-bot": "slack", "hcpbot-bot-metrics": "ops"} {
		svc := as[corev1.Service](t, find(t, objs, "Service", name))
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString(port) {
			t.Errorf("Service %s: type %q, ports %+v; want ClusterIP with only port %s", name, svc.Spec.Type, svc.Spec.Ports, port)
		}
		for k, v := range svc.Spec.Selector {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("Service %s selector %v does not select the bot's pods %v", name, svc.Spec.Selector, d.Spec.Template.Labels)
			}
		}
	}
	// Inbound: the Slack port from anywhere, ops only from pods of the
	// cluster (a namespace selector, no IP block), nothing else.
	np := as[networkingv1.NetworkPolicy](t, find(t, objs, "NetworkPolicy", "hcpbot-bot"))
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("NetworkPolicy policyTypes %v, want [Ingress]", np.Spec.PolicyTypes)
	}
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("NetworkPolicy selects %v, not the bot's pods %v", np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels)
		}
	}
	admitted := map[string]bool{}
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) != 1 || rule.Ports[0].Port == nil {
			t.Errorf("ingress rule %+v: want exactly one named port", rule)
			continue
		}
		port := rule.Ports[0].Port.String()
		admitted[port] = true
		switch port {
		case "slack":
		case "ops":
			if len(rule.From) != 1 || rule.From[0].IPBlock != nil || rule.From[0].NamespaceSelector == nil || rule.From[0].PodSelector != nil {
				t.Errorf("ops port admitted from %+v: want pods of the cluster only", rule.From)
			}
		default:
			t.Errorf("ingress to port %s admitted", port)
		}
	}
	if !admitted["slack"] || !admitted["ops"] {
		t.Errorf("NetworkPolicy admits %v, want slack and ops", admitted)
	}
}

func TestNATSManifests(t *testing.T) {
	objs := render(t, "nats")
	checkCommon(t, objs)
	sts := as[appsv1.StatefulSet](t, find(t, objs, "StatefulSet", "nats"))
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 || sts.Spec.ServiceName != "nats" || len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("StatefulSet: replicas %v serviceName %q", sts.Spec.Replicas, sts.Spec.ServiceName)
	}
	checkPod(t, "nats", sts.Spec.Template.Spec, false)
	// The servers run the release the tests run against.
	if img := sts.Spec.Template.Spec.Containers[0].Image; img != "nats:"+natsserver.VERSION+"-alpine" {
		t.Errorf("NATS image %q, want nats:%s-alpine (the nats-server of go.mod)", img, natsserver.VERSION)
	}
	svc := as[corev1.Service](t, find(t, objs, "Service", "nats"))
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service nats is not headless: %q", svc.Spec.ClusterIP)
	}
	// nats.conf is valid for the nats-server hcpbot is built with, and
	// refuses to start with the placeholders of nkeys.env (fails closed).
	r := renderNATS(t)
	if _, _, err := parseNATS(t, r.conf, r.tlsDir, r.nkeys); err == nil {
		t.Error("nats.conf accepted the placeholder nkeys")
	}
	keys := map[string]string{}
	for k := range r.nkeys {
		keys[k] = natstest.NewUser(t).Public
	}
	opts, _, err := parseNATS(t, r.conf, r.tlsDir, keys)
	if err != nil {
		t.Fatalf("nats.conf: %v", err)
	}
	if !opts.SyncAlways {
		t.Error("nats.conf: jetstream sync_interval is not always: acknowledged writes can be lost on a power cut")
	}
	if !opts.JetStream || opts.StoreDir == "" || opts.Cluster.Name != "hcpbot" || len(opts.Routes) != 3 || opts.LeafNode.Port != 0 || opts.ServerName != "nats-0" {
		t.Errorf("nats.conf: jetstream %v store %q cluster %q routes %d leafnodes %d server %q",
			opts.JetStream, opts.StoreDir, opts.Cluster.Name, len(opts.Routes), opts.LeafNode.Port, opts.ServerName)
	}
	// TLS for clients and mutual TLS for routes; no anonymous user.
	routeTLS := opts.Cluster.TLSConfig != nil && opts.Cluster.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert
	if opts.TLSConfig == nil || !routeTLS || opts.NoAuthUser != "" || len(opts.Nkeys) != len(r.nkeys) || len(opts.Users) != 0 {
		t.Errorf("nats.conf: client TLS %v, route mutual TLS %v, no_auth_user %q, %d nkey users (want %d), %d password users",
			opts.TLSConfig != nil, routeTLS, opts.NoAuthUser, len(opts.Nkeys), len(r.nkeys), len(opts.Users))
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "leafnodes" {
			t.Error("Service nats exposes a leafnode port; agents connect as clients")
		}
	}
	if _, err := os.Stat("nats/README.md"); err != nil {
		t.Error(err)
	}
}

// The Slack app manifest asks for the scopes the code uses and points at
// the bot's endpoints.
func TestSlackManifest(t *testing.T) {
	data, err := os.ReadFile("../slack/manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Features struct {
			SlashCommands []struct {
				Command, URL string
			} `json:"slash_commands"`
		}
		OAuthConfig struct {
			Scopes struct{ Bot []string }
		} `json:"oauth_config"`
		Settings struct {
			Interactivity struct {
				IsEnabled  bool   `json:"is_enabled"`
				RequestURL string `json:"request_url"`
			}
			SocketModeEnabled *bool `json:"socket_mode_enabled"`
		}
	}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	scopes := slices.Sorted(slices.Values(m.OAuthConfig.Scopes.Bot))
	if want := []string{"channels:history", "chat:write", "commands", "groups:history", "usergroups:read", "users:read", "users:read.email"}; !slices.Equal(scopes, want) {
		t.Errorf("bot scopes %v, want %v", scopes, want)
	}
	if len(m.Features.SlashCommands) != 1 || m.Features.SlashCommands[0].Command != "/hcp" ||
		m.Features.SlashCommands[0].URL != "https://HOST"+chatops.CommandsPath {
		t.Errorf("slash commands %+v", m.Features.SlashCommands)
	}
	if !m.Settings.Interactivity.IsEnabled || m.Settings.Interactivity.RequestURL != "https://HOST"+chatops.ActionsPath {
		t.Errorf("interactivity %+v", m.Settings.Interactivity)
	}
	if m.Settings.SocketModeEnabled == nil || *m.Settings.SocketModeEnabled {
		t.Error("socket_mode_enabled must be present and false (HTTP mode, matching bot/config.yaml)")
	}
}

// applier applies rendered objects with server-side apply.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// newApplier applies to the management cluster.
func newApplier() applier { return applierFor(env.Kube, env.Dynamic) }

func applierFor(kc kubernetes.Interface, dc dynamic.Interface) applier {
	return applier{dyn: dc, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kc.Discovery()))}
}

func (a applier) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

func (a applier) apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) error {
	ri, err := a.resource(u)
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: "hcpbot-deploy-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Apply(ctx, u.GetName(), u, opts)
	return err
}

// bases are the kustomizations of a management cluster running everything:
// agent/clusters needs HyperShift's namespace (it comes last).
var bases = []string{"agent", "bot", "nats", "agent/clusters"}

// deploy applies the kustomizations to the management cluster: each
// object with a server-side dry run first, then for real. Cluster-scoped
// objects but Namespaces are deleted when the test ends (registered before
// the agent's own clean-up, so they outlive it).
func deploy(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	a := newApplier()
	var objs []*unstructured.Unstructured
	for _, dir := range bases {
		objs = append(objs, render(t, dir)...)
	}
	// Namespaces first: a dry run in a namespace that does not exist fails.
	slices.SortStableFunc(objs, func(x, y *unstructured.Unstructured) int {
		return boolInt(y.GetKind() == "Namespace") - boolInt(x.GetKind() == "Namespace")
	})
	var clusterScoped []*unstructured.Unstructured
	for _, o := range objs {
		if err := a.apply(ctx, o, true); err != nil {
			t.Fatalf("dry run of %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		// Namespaces stay: the test API server runs no namespace
		// controller, so a deleted one would stay Terminating and refuse
		// the next test's objects.
		if o.GetNamespace() == "" && o.GetKind() != "Namespace" {
			clusterScoped = append(clusterScoped, o)
		}
	}
	t.Cleanup(func() {
		for _, o := range slices.Backward(clusterScoped) {
			ri, err := a.resource(o)
			if err == nil {
				err = ri.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// asAgent is the management cluster's configuration, impersonating the
// agent's ServiceAccount: every call is authorised by the deployed RBAC
// (and admitted by the deployed policy) as for the real pods.
func asAgent(t *testing.T) (*rest.Config, kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentUser}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, kc, dc
}

// runAgent runs the agent as cmd/hcpbot's agentRun does (leader election,
// watchers, action server inside the leader's run) with the given clients,
// until the test ends.
func runAgent(t *testing.T, kc kubernetes.Interface, dc dynamic.Interface, conn *bus.Conn, source string, trusted *approval.Signer, log zerolog.Logger) {
	t.Helper()
	metrics := watchers.NewMetrics(prometheus.NewRegistry())
	pub := watchers.NewJetStreamPublisher(conn.JS, 1000, metrics, log)
	kf, df := informers.NewSharedInformerFactory(kc, 0), dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	agent, err := watchers.New(watchers.Config{Source: source, Identity: "hcpbot-agent-0", ProbeInterval: time.Second}, kc, kf, df, pub, metrics, log)
	if err != nil {
		t.Fatal(err)
	}
	pub.OnResync(agent.Resync)
	trail, err := audit.ForAgent(conn.JS, source)
	if err != nil {
		t.Fatal(err)
	}
	serve := approval.AgentConfig{
		Source: source, Executor: &actions.Executor{Dynamic: dc, Kube: kc}, Log: log, Trail: trail,
		Trust: approval.Trust{Keys: []string{trusted.PublicKey()}, FourEyes: true},
	}
	ctx, cancel := context.WithCancel(context.Background())
	kf.Start(ctx.Done())
	df.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(ctx) })
	wg.Go(func() {
		err := watchers.RunElected(ctx, kc, watchers.LeaderConfig{Namespace: namespace, Name: "hcpbot-agent", Identity: "hcpbot-agent-0"}, metrics, log,
			func(ctx context.Context) {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				var served sync.WaitGroup
				served.Go(func() {
					if err := approval.Serve(ctx, conn.JS, serve); err != nil {
						log.Error().Err(err).Msg("not serving action requests")
					}
				})
				if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
					log.Error().Err(err).Msg("agent stopped")
				}
				cancel()
				served.Wait()
			})
		if err != nil {
			log.Error().Err(err).Msg("leader election")
		}
	})
	t.Cleanup(func() {
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop")
		}
	})
}

// botSide is the bot's part of an action: its approval flow (loop
// running) and the key the agent trusts.
type botSide struct {
	flow   *approval.Flow
	signer *approval.Signer
}

func newBotSide(t *testing.T, conn *bus.Conn) *botSide {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	flow, err := approval.NewFlow(ctx, conn.JS, approval.Config{Signer: signer, Trail: log,
		Policy: approval.Policy{Approvers: []string{"UAPPROVER1", "UAPPROVER2"}, FourEyes: true}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = flow.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &botSide{flow: flow, signer: signer}
}

// request has req proposed and approved by two people, as the bot does,
// and returns what the agent reported.
func (b *botSide) request(t *testing.T, source string, req actions.Change) *actions.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := b.flow.Propose(ctx, req, req.RequestedBy, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	outcome := make(chan approval.Proposal, 1)
	if _, err = b.flow.Approve(ctx, p.ID, "UAPPROVER1", approval.OnOutcome(func(p approval.Proposal) { outcome <- p })); err != nil {
		t.Fatal(err)
	}
	select {
	case p = <-outcome:
	case <-ctx.Done():
		t.Fatalf("%s %s: no outcome", req.Type, p.ID)
	}
	if p.State != approval.StateExecuted || p.Result == nil {
		t.Fatalf("%s %s: %s: %s (%s)", req.Type, p.ID, p.State, p.Reason, p.Code)
	}
	return p.Result
}

// eventSubjects returns the stream's subjects of source's events about the
// cluster, by type.
func eventSubjects(t *testing.T, js jetstream.JetStream, source string, c event.ClusterRef) map[event.Type]uint64 {
	t.Helper()
	filter, err := event.SubjectFilter(source, &c, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, event.StreamName)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	out := map[event.Type]uint64{}
	for subj, n := range info.State.Subjects {
		out[event.Type(subj[strings.LastIndexByte(subj, '.')+1:])] += n
	}
	return out
}

// The deployed agent, under its own ServiceAccount: it starts, wins the
// Lease, watches the management cluster and the seed 000 hosted cluster
// through its admin kubeconfig Secret, publishes to NATS, fixes noProxy,
// exposes a Service and rolls the exposure back — and it can do nothing
// the RBAC does not list.
func TestDeployedAgentLeastPrivilege(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	const source = "mgmt-deploy"

	// Seed 000 in the namespace the manifests bind (HyperShift's default),
	// with KubeVirt workers for the exposure, and OpenShift's Proxy/cluster.
	c := scenario.BehindProxy(hcNamespace, "example")
	hosted := env.HostedCluster(t, c)
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, c.Name+"-np", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.VirtLaunchers(ctx, env.Kube, c, c.Name+"-np", nodes); err != nil {
		t.Fatal(err)
	}
	petclinic(t, hosted.Kube)
	proxies := env.Dynamic.Resource(hypershift.ProxyGVR)
	px := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"httpsProxy": "http://proxy.corp.example:3128", "noProxy": ".corp.example",
	}}}
	px.SetAPIVersion("config.openshift.io/v1")
	px.SetKind("Proxy")
	px.SetName(hypershift.ProxyName)
	if _, err := proxies.Create(ctx, px, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxies.Delete(context.Background(), hypershift.ProxyName, metav1.DeleteOptions{}) })

	deploy(t)

	// The agent, in-process, with the ServiceAccount's permissions only.
	var logs syncbuf.Buffer
	log := zerolog.New(&logs).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	logging.RouteKlog(log) // reflector errors ("forbidden") land in logs
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs.String())
		}
	})
	_, kc, dc := asAgent(t)
	srv := natstest.RunServer(t)
	connect := func(name string) *bus.Conn {
		cctx, cancel := context.WithTimeout(ctx, natstest.Timeout)
		defer cancel()
		conn, err := bus.Connect(cctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: name}, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		return conn
	}
	agentConn, botConn := connect("agent"), connect("bot")
	if _, err := bus.EnsureStream(ctx, agentConn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	bot := newBotSide(t, botConn)
	runAgent(t, kc, dc, agentConn, source, bot.signer, log)

	// Leader election with the Lease in its namespace.
	testenv.Eventually(t, 30*time.Second, "the agent holding Lease hcpbot/hcpbot-agent", func() bool {
		l, err := env.Kube.CoordinationV1().Leases(namespace).Get(ctx, "hcpbot-agent", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "hcpbot-agent-0"
	})
	// Management facts (HostedCluster) and hosted facts (a node going
	// NotReady, seen through the admin kubeconfig Secret) reach NATS.
	ref := event.ClusterRef{Namespace: c.Namespace, Name: c.Name}
	testenv.Eventually(t, 60*time.Second, "the hostedcluster event", func() bool {
		return eventSubjects(t, botConn.JS, source, ref)[event.TypeHostedCluster] > 0
	})
	testenv.Eventually(t, 60*time.Second, "the hosted cluster's nodes watched", func() bool {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "NodeStatusUnknown", "Kubelet stopped posting node status."); err != nil {
			t.Fatal(err)
		}
		return eventSubjects(t, botConn.JS, source, ref)[event.TypeNode] > 0
	})
	t.Logf("agent elected and publishing after %v", time.Since(started).Round(time.Millisecond))

	// The seed 000 fix, approved and sent by the bot over NATS.
	fix := actions.Change{ID: "fix-deploy01", Type: actions.TypeNoProxyPatch, RequestedBy: "alice",
		Cluster: actions.ClusterRef{Namespace: c.Namespace, Name: c.Name},
		NoProxy: &actions.NoProxyParams{Expected: scenario.SeedNoProxy, Add: []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"}}}
	res := bot.request(t, source, fix)
	if res.Outcome != actions.OutcomeApplied {
		t.Errorf("noProxy fix: %+v", res)
	}
	hc, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(hc.Object, "spec", "configuration", "proxy", "noProxy"); v != scenario.SeedNoProxy+",kubernetes,172.31.0.0/16,10.132.0.0/14" {
		t.Errorf("noProxy after the fix: %q", v)
	}
	testenv.Eventually(t, 30*time.Second, "the agent reporting its own proxy change", func() bool {
		return eventSubjects(t, botConn.JS, source, ref)[event.TypeProxyChange] > 0
	})
	// Each execution recorded as the agent records it, with its rights
	// only: one Event on the object changed, however often recorded.
	agentX := &actions.Executor{Dynamic: dc, Kube: kc, Instance: "hcpbot-agent-0"}
	recorded := func(ch actions.Change, res *actions.Result, ns, name, kind string) {
		t.Helper()
		for range 2 {
			if err := agentX.RecordEvent(ctx, ch, res, actions.Actors{RequestedBy: "alice", Approvers: []string{"bob"}}); err != nil {
				t.Errorf("RecordEvent %s as the agent: %v", ch.ID, err)
			}
		}
		ev := env.Kube.CoreV1().Events(ns)
		list, err := ev.List(ctx, metav1.ListOptions{
			FieldSelector: ev.GetFieldSelector(&name, &ns, &kind, nil).String(),
			LabelSelector: actions.LabelActionID + "=" + ch.ID,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Errorf("Events of %s on %s %s/%s: %+v, want one", ch.ID, kind, ns, name, list.Items)
		}
	}
	recorded(fix, res, c.Namespace, c.Name, "HostedCluster")
	// The same on standalone OpenShift's Proxy/cluster.
	pfix := actions.Change{ID: "fix-deploy02", Type: actions.TypeNoProxyPatch, RequestedBy: "alice",
		Cluster: actions.ClusterRef{Name: hypershift.ProxyName},
		NoProxy: &actions.NoProxyParams{Target: actions.TargetProxy, Expected: ".corp.example", Add: []string{"kubernetes"}}}
	pres := bot.request(t, source, pfix)
	if pres.Outcome != actions.OutcomeApplied {
		t.Errorf("Proxy/cluster fix: %+v", pres)
	}
	recorded(pfix, pres, "", hypershift.ProxyName, "Proxy")

	// Seed 004: expose, then roll back, through the agent.
	expose := actions.Change{ID: "expo-deploy01", Type: actions.TypeExposeNodePort, RequestedBy: "alice",
		Cluster: actions.ClusterRef{Namespace: c.Namespace, Name: c.Name},
		Expose:  &actions.ExposeParams{Namespace: appNS, Service: "petclinic"}}
	exp := bot.request(t, source, expose)
	if exp.Outcome != actions.OutcomeApplied || len(exp.Created) != 2 || exp.Undo == nil {
		t.Fatalf("expose: %+v", exp)
	}
	if _, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, actions.ManagementServiceName(expose.ID), metav1.GetOptions{}); err != nil {
		t.Errorf("management Service of the exposure: %v", err)
	}
	recorded(expose, exp, cpNS, actions.ManagementServiceName(expose.ID), "Service")
	rollback := actions.Change{ID: "undo-deploy01", Type: actions.TypeRollback, RequestedBy: "alice",
		Cluster: expose.Cluster, Rollback: &actions.RollbackParams{Undo: *exp.Undo}}
	rres := bot.request(t, source, rollback)
	if rres.Outcome != actions.OutcomeRolledBack {
		t.Errorf("rollback: %+v", rres)
	}
	recorded(rollback, rres, c.Namespace, c.Name, "HostedCluster")
	if _, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, actions.ManagementServiceName(expose.ID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("management Service after the rollback: %v", err)
	}

	// Nothing the agent did was refused: no informer or call was forbidden.
	if l := strings.ToLower(logs.String()); strings.Contains(l, "forbidden") || strings.Contains(l, "is not allowed") {
		t.Errorf("the agent was refused something it needs:\n%s", logs.String())
	}

	// And it can do nothing more than listed.
	checkAccess(t, kc, cpNS)
	checkAdmission(t, kc, cpNS)
}

// checkAccess asks the API server, as the agent, what it may do.
func checkAccess(t *testing.T, kc kubernetes.Interface, cpNS string) {
	t.Helper()
	type attr = authorizationv1.ResourceAttributes
	for _, tc := range []struct {
		attr
		allowed bool
	}{
		// Granted (sanity: the reviews see the deployed RBAC).
		{attr{Verb: "watch", Group: "hypershift.openshift.io", Resource: "hostedclusters"}, true},
		{attr{Verb: "patch", Group: "hypershift.openshift.io", Resource: "hostedclusters", Namespace: hcNamespace, Name: "example"}, true},
		{attr{Verb: "list", Resource: "secrets", Namespace: hcNamespace}, true},
		{attr{Verb: "watch", Resource: "configmaps"}, true},
		{attr{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: namespace, Name: "hcpbot-agent"}, true},
		{attr{Verb: "patch", Group: "config.openshift.io", Resource: "proxies", Name: "cluster"}, true},
		{attr{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		{attr{Verb: "create", Resource: "events", Namespace: cpNS}, true},
		{attr{Verb: "create", Resource: "events", Namespace: metav1.NamespaceDefault}, true},
		// Not granted.
		{attr{Verb: "delete", Group: "hypershift.openshift.io", Resource: "hostedclusters", Namespace: hcNamespace, Name: "example"}, false},
		{attr{Verb: "create", Group: "hypershift.openshift.io", Resource: "hostedclusters", Namespace: hcNamespace}, false},
		{attr{Verb: "update", Group: "hypershift.openshift.io", Resource: "hostedclusters", Namespace: hcNamespace, Name: "example"}, false},
		{attr{Verb: "patch", Group: "hypershift.openshift.io", Resource: "hostedclusters", Namespace: "other-clusters", Name: "example"}, false},
		{attr{Verb: "patch", Group: "hypershift.openshift.io", Resource: "hostedclusters", Subresource: "status", Namespace: hcNamespace, Name: "example"}, false},
		{attr{Verb: "update", Group: "hypershift.openshift.io", Resource: "nodepools", Namespace: hcNamespace, Name: "example"}, false},
		{attr{Verb: "list", Resource: "secrets"}, false},
		{attr{Verb: "get", Resource: "configmaps", Namespace: hcNamespace, Name: "user-ca-bundle"}, false},
		{attr{Verb: "update", Resource: "configmaps", Namespace: hcNamespace, Name: "user-ca-bundle"}, false},
		{attr{Verb: "get", Resource: "secrets", Namespace: "kube-system", Name: "any"}, false},
		{attr{Verb: "get", Resource: "secrets", Namespace: namespace, Name: "hcpbot-agent-nats"}, false},
		{attr{Verb: "get", Resource: "secrets", Namespace: cpNS, Name: "any"}, false},
		{attr{Verb: "update", Resource: "secrets", Namespace: hcNamespace, Name: "example-admin-kubeconfig"}, false},
		{attr{Verb: "create", Group: "apps", Resource: "deployments", Namespace: namespace}, false},
		{attr{Verb: "create", Resource: "pods", Namespace: cpNS}, false},
		{attr{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: cpNS, Name: "any"}, false},
		{attr{Verb: "patch", Resource: "nodes", Name: "any"}, false},
		{attr{Verb: "get", Resource: "nodes", Name: "any"}, false},
		{attr{Verb: "update", Resource: "services", Namespace: cpNS, Name: "any"}, false},
		{attr{Verb: "patch", Group: "config.openshift.io", Resource: "proxies", Name: "other"}, false},
		{attr{Verb: "update", Group: "config.openshift.io", Resource: "proxies", Name: "cluster"}, false},
		{attr{Verb: "delete", Group: "config.openshift.io", Resource: "proxies", Name: "cluster"}, false},
		{attr{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: namespace, Name: "other"}, false},
		{attr{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: namespace, Name: "hcpbot-agent"}, false},
		{attr{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"}, false},
		{attr{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: hcNamespace}, false},
		{attr{Verb: "impersonate", Resource: "serviceaccounts", Namespace: namespace, Name: "default"}, false},
		// Impersonation is not in the base: `hcpbot rbac` generates it for
		// the mapped identities only (actions.TestImpersonationLeastPrivilege).
		{attr{Verb: "impersonate", Resource: "users", Name: "alice"}, false},
		{attr{Verb: "impersonate", Resource: "groups", Name: "system:masters"}, false},
		{attr{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: "hcpbot.io/action"}, false},
		{attr{Verb: "impersonate:user-info", Group: "authentication.k8s.io", Resource: "users", Name: "alice"}, false},
		{attr{Verb: "impersonate-on:user-info:patch", Group: "hypershift.openshift.io", Resource: "hostedclusters", Namespace: hcNamespace, Name: "any"}, false},
		{attr{Verb: "get", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, false},
		{attr{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}, false},
		{attr{Verb: "get", Resource: "events", Namespace: hcNamespace, Name: "any"}, false},
		{attr{Verb: "list", Resource: "events"}, false},
		{attr{Verb: "update", Resource: "events", Namespace: hcNamespace, Name: "any"}, false},
		{attr{Verb: "patch", Resource: "events", Namespace: cpNS, Name: "any"}, false},
		{attr{Verb: "delete", Resource: "events", Namespace: cpNS, Name: "any"}, false},
		{attr{Verb: "create", Group: "events.k8s.io", Resource: "events", Namespace: hcNamespace}, false},
	} {
		r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(),
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &tc.attr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != tc.allowed {
			t.Errorf("%s %s.%s/%s %s/%s: allowed=%v, want %v (%s)", tc.Verb, tc.Resource, tc.Group, tc.Subresource, tc.Namespace, tc.Name,
				r.Status.Allowed, tc.allowed, r.Status.Reason)
		}
	}
}

// checkAdmission: RBAC lets the agent write Services anywhere; the deployed
// ValidatingAdmissionPolicy keeps it to its own Services in control-plane
// namespaces. Dry runs, so that nothing is created either way.
func checkAdmission(t *testing.T, kc kubernetes.Interface, cpNS string) {
	t.Helper()
	ctx := context.Background()
	svc := func(ns string, labels map[string]string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-", Labels: labels},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
	}
	owned := map[string]string{actions.LabelManagedBy: actions.ManagedBy}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for what, s := range map[string]*corev1.Service{
		"outside control-plane namespaces": svc("kube-system", owned),
		"in the agent's namespace":         svc(namespace, owned),
		"not labelled as hcpbot's":         svc(cpNS, nil),
	} {
		testenv.Eventually(t, 30*time.Second, "the admission policy refusing a Service "+what, func() bool {
			_, err := kc.CoreV1().Services(s.Namespace).Create(ctx, s, dry)
			return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
		})
	}
	if _, err := kc.CoreV1().Services(cpNS).Create(ctx, svc(cpNS, owned), dry); err != nil {
		t.Errorf("an hcpbot Service in %s: %v", cpNS, err)
	}
	// Writes the agent makes as an approver (actions.Executor.As) carry
	// the action id in the user's extra and are held to the same rule; a
	// person's own writes are not. (The impersonated user is in
	// system:masters here so that RBAC lets both through and only
	// admission decides.)
	asApprover := func(extra map[string][]string) kubernetes.Interface {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:masters"}, Extra: extra}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	forAction := asApprover(map[string][]string{"hcpbot.io/action": {"expo-deploy02"}})
	testenv.Eventually(t, 30*time.Second, "the admission policy refusing an approver's Service outside control-plane namespaces for an hcpbot action", func() bool {
		_, err := forAction.CoreV1().Services("kube-system").Create(ctx, svc("kube-system", owned), dry)
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
	})
	if _, err := forAction.CoreV1().Services(cpNS).Create(ctx, svc(cpNS, nil), dry); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("an approver's unlabelled Service for an hcpbot action: %v, want refused", err)
	}
	if _, err := forAction.CoreV1().Services(cpNS).Create(ctx, svc(cpNS, owned), dry); err != nil {
		t.Errorf("an approver's hcpbot Service in %s for an hcpbot action: %v", cpNS, err)
	}
	if _, err := asApprover(nil).CoreV1().Services("kube-system").Create(ctx, svc("kube-system", nil), dry); err != nil {
		t.Errorf("a person's own Service (no hcpbot action): %v, want admitted", err)
	}

	// Deleting someone else's Service in a control-plane namespace.
	other, err := env.Kube.CoreV1().Services(cpNS).Create(ctx, svc(cpNS, map[string]string{"app": "other"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = kc.CoreV1().Services(cpNS).Delete(ctx, other.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("deleting a Service that is not hcpbot's: %v, want refused", err)
	}

	// Events: only the agent's own, only about what its actions change.
	ev := func(component, kind string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: cpNS, GenerateName: "probe."},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: kind, Namespace: cpNS, Name: "any"},
			Reason:         "Probe", Message: "probe", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: component}, ReportingController: component,
		}
	}
	for what, e := range map[string]*corev1.Event{
		"reported by another component": ev("kubelet", "Service"),
		"about a Pod":                   ev(actions.EventComponent, "Pod"),
	} {
		testenv.Eventually(t, 30*time.Second, "the admission policy refusing an Event "+what, func() bool {
			_, err := kc.CoreV1().Events(cpNS).Create(ctx, e, dry)
			return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
		})
	}
	if _, err := kc.CoreV1().Events(cpNS).Create(ctx, ev(actions.EventComponent, "Service"), dry); err != nil {
		t.Errorf("an hcpbot Event about a Service in %s: %v", cpNS, err)
	}
}

const appNS = "petclinic"

// petclinic is the seed 004 app in the hosted cluster.
func petclinic(t *testing.T, kc kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "petclinic"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "petclinic"},
			Ports:    []corev1.ServicePort{{Name: "8080-tcp", Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := kc.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Every base applies on a fresh cluster (its own API server, no HyperShift
// yet), whatever was applied before it: agent, bot and nats in each of the
// six orders, each object as `kubectl apply -k` sends it. agent/clusters
// needs HyperShift's namespace: before it exists the API server refuses
// it, naming the namespace; once it exists it applies.
func TestDeployBasesApplyInAnyOrder(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	rendered := map[string][]*unstructured.Unstructured{}
	for _, dir := range bases {
		rendered[dir] = render(t, dir)
	}
	var orders [][]string
	var permute func(done, rest []string)
	permute = func(done, rest []string) {
		if len(rest) == 0 {
			orders = append(orders, done)
			return
		}
		for i := range rest {
			permute(append(slices.Clone(done), rest[i]), append(slices.Clone(rest[:i]), rest[i+1:]...))
		}
	}
	permute(nil, []string{"agent", "bot", "nats"})
	for i, order := range orders {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			name := fmt.Sprintf("fresh-%d", i)
			srv, err := env.CP.AddAPIServer(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { env.CP.RemoveAPIServer(name) })
			kc, dc, err := srv.Clients()
			if err != nil {
				t.Fatal(err)
			}
			a := applierFor(kc, dc)
			apply := func(dir string) error {
				for _, o := range rendered[dir] {
					if err := a.apply(ctx, o, false); err != nil {
						return fmt.Errorf("%s: %s %s/%s: %w", dir, o.GetKind(), o.GetNamespace(), o.GetName(), err)
					}
				}
				return nil
			}
			for _, dir := range order {
				if err := apply(dir); err != nil {
					t.Errorf("applied after %v: %v", order[:slices.Index(order, dir)], err)
				}
			}
			err = apply("agent/clusters")
			if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `namespaces "`+hcNamespace+`" not found`) {
				t.Errorf("agent/clusters before HyperShift's namespace exists: %v, want the namespace named as missing", err)
			}
			if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hcNamespace}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := apply("agent/clusters"); err != nil {
				t.Errorf("once namespace %s exists: %v", hcNamespace, err)
			}
		})
	}
}
