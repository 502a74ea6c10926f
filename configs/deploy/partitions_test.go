package deploy_test

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hcpbot/hcpbot/configs"
)

// The overlay bot-partitions runs bot/ as two groups: a Deployment each
// (hcpbot-bot with --partition=0, hcpbot-bot-p1 with --partition=1), two
// replicas each, pods told apart by a label in each selector (no
// Deployment or PodDisruptionBudget takes the other group's pods), one
// config with bot.partitions 2 valid as hcpbot reads it and mounted by
// both, so their leases and checkpoints are bot-p2-0 and bot-p2-1;
// bot/'s Services select the pods of both groups. Apart from the flag and
// the label, each Deployment is bot/'s. A fresh API server takes it all.
func TestBotPartitionsManifests(t *testing.T) {
	objs := render(t, "bot-partitions")
	checkCommon(t, objs)
	base := as[appsv1.Deployment](t, find(t, render(t, "bot"), "Deployment", "hcpbot-bot"))
	cmObj := find(t, objs, "ConfigMap", "hcpbot-bot-config")
	data, _, _ := unstructured.NestedString(cmObj.Object, "data", "config.yaml")
	cfg, err := configs.Parse([]byte(data), "config.yaml")
	if err != nil {
		t.Fatalf("the groups' config: %v", err)
	}
	if cfg.Bot.Partitions != 2 {
		t.Fatalf("bot.partitions %d, want 2", cfg.Bot.Partitions)
	}
	var cms int
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			cms++
		}
	}
	if cms != 1 {
		t.Errorf("%d ConfigMaps, want the one both groups mount", cms)
	}
	var pods []labels.Set
	for k, name := range []string{"hcpbot-bot", "hcpbot-bot-p1"} {
		d := as[appsv1.Deployment](t, find(t, objs, "Deployment", name))
		spec := d.Spec.Template.Spec
		checkPod(t, name, spec, true)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("%s: replicas %v, want 2", name, d.Spec.Replicas)
		}
		flag := "--partition=" + strconv.Itoa(k)
		c := spec.Containers[0]
		flags := 0
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--partition") {
				flags++
			}
		}
		if !slices.Contains(c.Args, flag) || flags != 1 {
			t.Errorf("%s: args %q, want %s once", name, c.Args, flag)
		}
		if got := cfg.Bot.PartitionSet().ID(k); got.Check() != nil || got.Suffix("bot") != "bot-p2-"+strconv.Itoa(k) {
			t.Errorf("%s: group %+v, lease %s", name, got, got.Suffix("bot"))
		}
		if d.Spec.Selector.MatchLabels["hcpbot.io/partition"] != strconv.Itoa(k) || d.Spec.Template.Labels["hcpbot.io/partition"] != strconv.Itoa(k) {
			t.Errorf("%s: selector %v, pod labels %v: want hcpbot.io/partition %d", name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels, k)
		}
		mounted := false
		for _, v := range spec.Volumes {
			mounted = mounted || v.ConfigMap != nil && v.ConfigMap.Name == cmObj.GetName()
		}
		if !mounted {
			t.Errorf("%s does not mount %s", name, cmObj.GetName())
		}
		pdb := as[policyv1.PodDisruptionBudget](t, find(t, objs, "PodDisruptionBudget", name))
		if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
			t.Errorf("PodDisruptionBudget %s selects %v, its Deployment %v", name, pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels)
		}
		pods = append(pods, labels.Set(d.Spec.Template.Labels))

		// bot/'s Deployment but for the flag, the label and the config's name.
		same := d.DeepCopy()
		same.Spec.Template.Spec.Containers[0].Args = slices.DeleteFunc(same.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return a == flag })
		for _, m := range []map[string]string{same.Spec.Selector.MatchLabels, same.Spec.Template.Labels,
			same.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels} {
			delete(m, "hcpbot.io/partition")
		}
		for i, v := range same.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				same.Spec.Template.Spec.Volumes[i].ConfigMap.Name = base.Spec.Template.Spec.Volumes[i].ConfigMap.Name
			}
		}
		if !reflect.DeepEqual(same.Spec, base.Spec) {
			t.Errorf("%s differs from bot/'s Deployment beyond its group", name)
		}
	}
	for k := range pods {
		for j := range pods {
			sel := labels.SelectorFromSet(labels.Set(as[appsv1.Deployment](t, find(t, objs, "Deployment", []string{"hcpbot-bot", "hcpbot-bot-p1"}[k])).Spec.Selector.MatchLabels))
			if sel.Matches(pods[j]) != (k == j) {
				t.Errorf("group %d's selector matches group %d's pods: %v", k, j, sel.Matches(pods[j]))
			}
		}
	}
	for _, name := range []string{"hcpbot-bot", "hcpbot-bot-metrics"} {
		svc := as[corev1.Service](t, find(t, objs, "Service", name))
		for k, p := range pods {
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(p) {
				t.Errorf("Service %s does not reach group %d", name, k)
			}
		}
	}

	// The API server validates what a render cannot (each Deployment's
	// selector matching its pods' labels, among others).
	env.Need(t)
	ctx := context.Background()
	srv, err := env.CP.AddAPIServer(ctx, "bot-partitions")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.CP.RemoveAPIServer("bot-partitions") })
	kc, dc, err := srv.Clients()
	if err != nil {
		t.Fatal(err)
	}
	a := applierFor(kc, dc)
	for _, o := range objs {
		if err := a.apply(ctx, o, false); err != nil {
			t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}
