package actions_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// The agent dies during an exposure: between the hosted and the management
// Service creation, then after both (each time the create's answer is
// lost). The redelivered request finds what the earlier attempt made by
// the action id label, completes it, and reports "applied" with both
// Services and the full Undo; Observe says the same without writing.
func TestExposeReRunAfterLostCreate(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "kv-rerun")
	hosted := env.HostedCluster(t, c)
	petclinic(t, hosted.Kube)
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	x, mgmt, hostedRec := executor(t)

	for _, tc := range []struct {
		id   string
		rec  *recorder
		what string
		// left: the Services the lost attempt leaves behind.
		left []string
	}{
		{"expo-0101abcd", hostedRec, "between the two creations", []string{"petclinic-hcpbot-np"}},
		{"expo-0102abcd", mgmt, "after both creations", []string{"petclinic-hcpbot-np", actions.ManagementServiceName("expo-0102abcd")}},
	} {
		req := exposeReq(tc.id, c)
		wantCreated := []actions.ObjectRef{
			{Cluster: actions.ClusterHosted, Kind: "Service", Namespace: appNS, Name: "petclinic-hcpbot-np"},
			{Cluster: actions.ClusterManagement, Kind: "Service", Namespace: cpNS, Name: actions.ManagementServiceName(tc.id)},
		}
		wantUndo := &actions.Undo{ActionID: tc.id, Type: actions.TypeExposeNodePort, Cluster: req.Cluster, Expose: &actions.ExposeUndo{HostedNamespace: appNS}}

		tc.rec.fail = once("create services", failure{lost: true})
		_, err := x.Execute(ctx, req)
		tc.rec.fail = nil
		if !actions.Transient(err) {
			t.Fatalf("%s: err = %v, want a transient error", tc.what, err)
		}
		var left []string
		for _, s := range append(serviceNames(t, hosted.Kube, appNS), serviceNames(t, env.Kube, cpNS)...) {
			if s != "petclinic" {
				left = append(left, s)
			}
		}
		if !slices.Equal(left, tc.left) {
			t.Fatalf("%s: Services left %v, want %v (a transient failure cleans nothing up)", tc.what, left, tc.left)
		}
		obs, in := observe(t, x, mgmt, req)
		hostedRec.take()
		if full := len(tc.left) == 2; in != full {
			t.Errorf("%s: Observe in place = %v, want %v", tc.what, in, full)
		}

		res, err := x.Execute(ctx, req)
		if err != nil {
			t.Fatalf("%s: re-run: %v", tc.what, err)
		}
		if res.Outcome != actions.OutcomeApplied || !slices.Equal(res.Created, wantCreated) || !reflect.DeepEqual(res.Undo, wantUndo) || len(res.Ports) != 3 {
			t.Errorf("%s: re-run %+v", tc.what, res)
		}
		t.Logf("%s: %s", tc.what, res.Summary)
		if in && !reflect.DeepEqual(obs, res) {
			t.Errorf("%s: Observe reported %+v, the re-run %+v", tc.what, obs, res)
		}
		obs, in = observe(t, x, mgmt, req)
		if !in || !slices.Equal(obs.Created, wantCreated) || !reflect.DeepEqual(obs.Undo, wantUndo) || !reflect.DeepEqual(obs.Ports, res.Ports) {
			t.Errorf("%s: Observe after the re-run: in place %v, %+v", tc.what, in, obs)
		}
		hostedRec.take()

		// Its rollback: Observe says in place only once nothing is left.
		rb := actions.Change{ID: "undo-" + strings.TrimPrefix(tc.id, "expo-"), Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "bob",
			Rollback: &actions.RollbackParams{Undo: *res.Undo}}
		if _, in := observe(t, x, mgmt, rb); in {
			t.Errorf("%s: Observe of the rollback before it ran: in place", tc.what)
		}
		if r, err := x.Execute(ctx, rb); err != nil || r.Outcome != actions.OutcomeRolledBack || len(r.Deleted) != 2 {
			t.Fatalf("%s: rollback %+v, %v", tc.what, r, err)
		}
		if obs, in := observe(t, x, mgmt, rb); !in || obs.Outcome != actions.OutcomeUnchanged {
			t.Errorf("%s: Observe of the rollback after it ran: in place %v, %+v", tc.what, in, obs)
		}
		if _, in := observe(t, x, mgmt, req); in {
			t.Errorf("%s: Observe of the exposure after its rollback: in place", tc.what)
		}
		hostedRec.take()
	}
}
