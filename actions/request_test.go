package actions_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

func noProxyRequest() actions.Change {
	return actions.Change{
		ID: "fix-0001abcd", Type: actions.TypeNoProxyPatch,
		Cluster:     actions.ClusterRef{Namespace: "clusters", Name: "example"},
		NoProxy:     &actions.NoProxyParams{Expected: scenario.SeedNoProxy, Add: []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"}},
		RequestedBy: "U024BE7LH (alice)",
	}
}

func exposeRequest() actions.Change {
	return actions.Change{
		ID: "expo-9f3k2m", Type: actions.TypeExposeNodePort,
		Cluster:     actions.ClusterRef{Namespace: "clusters", Name: "example.v2"},
		Expose:      &actions.ExposeParams{Namespace: "petclinic", Service: "petclinic", Ports: []actions.ExposePort{{Port: 8080, NodePort: 30001}, {Port: 8443}}},
		RequestedBy: "alice",
	}
}

// nodePortsRequest is seed 004's exposure with the runbook's node ports.
func nodePortsRequest() actions.Change {
	r := exposeRequest()
	r.Expose.Ports = nil
	r.Expose.NodePorts = []int32{30001, 30002, 30003}
	return r
}

func manyPorts(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = 30000 + int32(i)
	}
	return out
}

func rollbackRequest() actions.Change {
	return actions.Change{
		ID: "undo-77aa01", Type: actions.TypeRollback,
		Cluster: actions.ClusterRef{Namespace: "clusters", Name: "example"},
		Rollback: &actions.RollbackParams{Undo: actions.Undo{
			ActionID: "fix-0001abcd", Type: actions.TypeNoProxyPatch,
			Cluster: actions.ClusterRef{Namespace: "clusters", Name: "example"},
			NoProxy: &actions.NoProxyUndo{Previous: "a", Written: "a,kubernetes", ResourceVersion: "42"},
		}},
		RequestedBy: "alice",
	}
}

func TestValidateAccepts(t *testing.T) {
	proxyTarget := noProxyRequest()
	proxyTarget.Cluster = actions.ClusterRef{Name: "cluster"}
	proxyTarget.NoProxy.Target = actions.TargetProxy
	allPorts := exposeRequest()
	allPorts.Expose.Ports = nil
	seed004 := exposeRequest()
	seed004.Expose.Ports = nil
	seed004.Expose.NodePorts = []int32{30001, 30002, 30003}
	for name, r := range map[string]actions.Change{
		"noproxy": noProxyRequest(), "proxy-target": proxyTarget,
		"expose": exposeRequest(), "expose-all-ports": allPorts, "expose-nodeports": seed004, "rollback": rollbackRequest(),
	} {
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		base   func() actions.Change
		mutate func(*actions.Change)
		want   string // a fragment of the error naming the field
	}{
		"id-uppercase":           {noProxyRequest, func(r *actions.Change) { r.ID = "Fix-0001" }, "id"},
		"id-short-suffix":        {noProxyRequest, func(r *actions.Change) { r.ID = "fix-01" }, "id"},
		"id-long-prefix":         {noProxyRequest, func(r *actions.Change) { r.ID = "abcdefghi-0001" }, "id"},
		"id-newline":             {noProxyRequest, func(r *actions.Change) { r.ID = "fix-0001\n" }, "id"},
		"unknown-type":           {noProxyRequest, func(r *actions.Change) { r.Type = "delete-cluster" }, "type"},
		"missing-params":         {noProxyRequest, func(r *actions.Change) { r.NoProxy = nil }, "noProxy"},
		"extra-params":           {noProxyRequest, func(r *actions.Change) { r.Expose = exposeRequest().Expose }, "expose"},
		"no-requester":           {noProxyRequest, func(r *actions.Change) { r.RequestedBy = " " }, "requestedBy"},
		"requester-ctrl":         {noProxyRequest, func(r *actions.Change) { r.RequestedBy = "a\x1b[2J" }, "requestedBy"},
		"bad-namespace":          {noProxyRequest, func(r *actions.Change) { r.Cluster.Namespace = "Clusters" }, "cluster.namespace"},
		"empty-name":             {noProxyRequest, func(r *actions.Change) { r.Cluster.Name = "" }, "cluster.name"},
		"long-name":              {noProxyRequest, func(r *actions.Change) { r.Cluster.Name = strings.Repeat("a", 54) }, "cluster.name"},
		"nothing-to-add":         {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = nil }, "noProxy.add"},
		"too-many":               {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = make([]string, 33) }, "noProxy.add"},
		"two-entries":            {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = []string{"a.example,b.example"} }, "noProxy.add[0]"},
		"url-entry":              {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = []string{"https://kubernetes"} }, "noProxy.add[0]"},
		"bad-cidr":               {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = []string{"kubernetes", "10.0.0.0/33"} }, "noProxy.add[1]"},
		"wildcard":               {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = []string{"*"} }, "noProxy.add[0]"},
		"padded-entry":           {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = []string{" kubernetes"} }, "noProxy.add[0]"},
		"empty-entry":            {noProxyRequest, func(r *actions.Change) { r.NoProxy.Add = []string{""} }, "noProxy.add[0]"},
		"unknown-target":         {noProxyRequest, func(r *actions.Change) { r.NoProxy.Target = "Network" }, "target"},
		"proxy-namespaced":       {noProxyRequest, func(r *actions.Change) { r.NoProxy.Target = actions.TargetProxy }, "cluster"},
		"port-zero":              {exposeRequest, func(r *actions.Change) { r.Expose.Ports[0].Port = 0 }, "expose.ports[0].port"},
		"port-too-big":           {exposeRequest, func(r *actions.Change) { r.Expose.Ports[1].Port = 65536 }, "expose.ports[1].port"},
		"nodeport-negative":      {exposeRequest, func(r *actions.Change) { r.Expose.Ports[0].NodePort = -1 }, "expose.ports[0].nodePort"},
		"duplicate-port":         {exposeRequest, func(r *actions.Change) { r.Expose.Ports[1].Port = 8080 }, "expose.ports[1].port"},
		"duplicate-nodeport":     {exposeRequest, func(r *actions.Change) { r.Expose.Ports[1].NodePort = 30001 }, "expose.ports[1].nodePort"},
		"nodeports-with-ports":   {exposeRequest, func(r *actions.Change) { r.Expose.NodePorts = []int32{30005} }, "expose.nodePorts"},
		"nodeport-zero":          {nodePortsRequest, func(r *actions.Change) { r.Expose.NodePorts[1] = 0 }, "expose.nodePorts[1]"},
		"nodeport-huge":          {nodePortsRequest, func(r *actions.Change) { r.Expose.NodePorts[2] = 65536 }, "expose.nodePorts[2]"},
		"nodeports-negative":     {nodePortsRequest, func(r *actions.Change) { r.Expose.NodePorts[0] = -30001 }, "expose.nodePorts[0]"},
		"nodeports-duplicate":    {nodePortsRequest, func(r *actions.Change) { r.Expose.NodePorts[2] = 30001 }, "expose.nodePorts[2]"},
		"nodeports-too-many":     {nodePortsRequest, func(r *actions.Change) { r.Expose.NodePorts = manyPorts(33) }, "expose.nodePorts"},
		"nodeport-too-big":       {exposeRequest, func(r *actions.Change) { r.Expose.Ports[1].NodePort = 70000 }, "expose.ports[1].nodePort"},
		"ports-too-many":         {exposeRequest, func(r *actions.Change) { r.Expose.Ports = make([]actions.ExposePort, 33) }, "expose.ports"},
		"service-dns1035":        {exposeRequest, func(r *actions.Change) { r.Expose.Service = "1petclinic" }, "expose.service"},
		"service-dots":           {exposeRequest, func(r *actions.Change) { r.Expose.Service = "pet.clinic" }, "expose.service"},
		"namespace-empty":        {exposeRequest, func(r *actions.Change) { r.Expose.Namespace = "" }, "expose.namespace"},
		"rollback-of-rollback":   {rollbackRequest, func(r *actions.Change) { r.Rollback.Undo.Type = actions.TypeRollback }, "rollback.undo.type"},
		"rollback-no-data":       {rollbackRequest, func(r *actions.Change) { r.Rollback.Undo.NoProxy = nil }, "rollback.undo.noProxy"},
		"rollback-other-cluster": {rollbackRequest, func(r *actions.Change) { r.Rollback.Undo.Cluster.Name = "other" }, "rollback.undo.cluster"},
		"rollback-bad-id":        {rollbackRequest, func(r *actions.Change) { r.Rollback.Undo.ActionID = "x" }, "rollback.undo.actionID"},
	} {
		t.Run(name, func(t *testing.T) {
			r := tc.base()
			tc.mutate(&r)
			err := r.Validate()
			if !errors.Is(err, actions.ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// Requests travel over NATS as JSON: a round trip keeps them intact and
// still valid.
func TestRequestJSONRoundTrip(t *testing.T) {
	for _, r := range []actions.Change{noProxyRequest(), exposeRequest(), nodePortsRequest(), rollbackRequest()} {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back actions.Change
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, back) {
			t.Errorf("round trip changed the request:\n%s\n%+v", data, back)
		}
		if err := back.Validate(); err != nil {
			t.Errorf("decoded request invalid: %v", err)
		}
	}
	// The wire names are part of the contract with the other agents.
	data, _ := json.Marshal(noProxyRequest())
	const want = `{"id":"fix-0001abcd","type":"noproxy-patch","cluster":{"namespace":"clusters","name":"example"},"noProxy":{"expected":".corp.example,192.168.201.0/24","add":["kubernetes","172.31.0.0/16","10.132.0.0/14"]},"requestedBy":"U024BE7LH (alice)"}`
	if string(data) != want {
		t.Errorf("wire form\n got %s\nwant %s", data, want)
	}
	// A request without chosen node ports is what it always was.
	old := exposeRequest()
	old.Expose.Ports = nil
	data, _ = json.Marshal(old)
	const wantExpose = `{"id":"expo-9f3k2m","type":"expose-nodeport","cluster":{"namespace":"clusters","name":"example.v2"},"expose":{"namespace":"petclinic","service":"petclinic"},"requestedBy":"alice"}`
	if string(data) != wantExpose {
		t.Errorf("wire form\n got %s\nwant %s", data, wantExpose)
	}
	data, _ = json.Marshal(nodePortsRequest().Expose)
	if want := `{"namespace":"petclinic","service":"petclinic","nodePorts":[30001,30002,30003]}`; string(data) != want {
		t.Errorf("wire form\n got %s\nwant %s", data, want)
	}
}

// Requests forged straight onto the validator, as JSON that no bot would
// send (the agent decodes what arrives over NATS, then validates it): the
// node ports are held to their bounds, without duplicates or overlaps, and
// to the count limits.
func TestValidateForgedNodePorts(t *testing.T) {
	const head = `{"id":"expo-9f3k2m","type":"expose-nodeport","cluster":{"namespace":"clusters","name":"example"},"requestedBy":"mallory","expose":`
	for name, tc := range map[string]struct{ expose, want string }{
		"both ways":        {`{"namespace":"a","service":"b","ports":[{"port":80,"nodePort":30001}],"nodePorts":[30002]}`, "expose.nodePorts"},
		"zero":             {`{"namespace":"a","service":"b","nodePorts":[0]}`, "expose.nodePorts[0]"},
		"negative":         {`{"namespace":"a","service":"b","nodePorts":[-1]}`, "expose.nodePorts[0]"},
		"above 65535":      {`{"namespace":"a","service":"b","nodePorts":[30001,65536]}`, "expose.nodePorts[1]"},
		"duplicate":        {`{"namespace":"a","service":"b","nodePorts":[30001,30002,30001]}`, "expose.nodePorts[2]"},
		"port nodeport":    {`{"namespace":"a","service":"b","ports":[{"port":80,"nodePort":65536}]}`, "expose.ports[0].nodePort"},
		"same nodeport":    {`{"namespace":"a","service":"b","ports":[{"port":80,"nodePort":30001},{"port":81,"nodePort":30001}]}`, "expose.ports[1].nodePort"},
		"too many":         {`{"namespace":"a","service":"b","nodePorts":[` + strings.Trim(strings.Repeat("30001,", 33), ",") + `]}`, "expose.nodePorts"},
		"noproxy and expo": {`{"namespace":"a","service":"b"},"noProxy":{"expected":"","add":["kubernetes"]}`, "noProxy"},
	} {
		t.Run(name, func(t *testing.T) {
			var r actions.Change
			if err := json.Unmarshal([]byte(head+tc.expose+`}`), &r); err != nil {
				t.Fatal(err)
			}
			err := r.Validate()
			if !errors.Is(err, actions.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want ErrInvalid naming %s", err, tc.want)
			}
		})
	}
	// Out of int32 does not even decode.
	var r actions.Change
	if err := json.Unmarshal([]byte(head+`{"namespace":"a","service":"b","nodePorts":[4294997297]}}`), &r); err == nil {
		t.Errorf("a node port beyond int32 decoded: %+v", r.Expose)
	}
}

func TestNames(t *testing.T) {
	if got := actions.HostedServiceName("petclinic"); got != "petclinic-hcpbot-np" {
		t.Errorf("HostedServiceName = %q", got)
	}
	long := strings.Repeat("a", 60)
	if got := actions.HostedServiceName(long); len(got) > 63 || !strings.HasSuffix(got, "-hcpbot-np") {
		t.Errorf("HostedServiceName(60 chars) = %q (%d)", got, len(got))
	}
	if got := actions.ManagementServiceName("expo-9f3k2m"); got != "hcpbot-np-expo-9f3k2m" {
		t.Errorf("ManagementServiceName = %q", got)
	}
	pc := &actions.PortCollisionError{NodePort: 30080, Err: errors.New("boom")}
	if !errors.Is(pc, actions.ErrPortCollision) || !strings.Contains(pc.Error(), "30080") {
		t.Errorf("PortCollisionError %v", pc)
	}
}

// Invalid requests stop before any client is used (the Executor here has
// none).
func TestExecuteValidatesFirst(t *testing.T) {
	x := &actions.Executor{}
	bad := []actions.Change{noProxyRequest(), exposeRequest(), rollbackRequest()}
	bad[0].NoProxy.Add = []string{"*"}
	bad[1].Expose.Ports[0].Port = 0
	bad[2].Rollback.Undo.Type = "reboot"
	for _, r := range bad {
		if _, err := x.Execute(context.Background(), r); !errors.Is(err, actions.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", r.Type, err)
		}
	}
	if _, err := x.Rollback(context.Background(), actions.Undo{ActionID: "fix-0001abcd", Type: actions.TypeExposeNodePort}); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("Rollback without data: %v", err)
	}
	if _, err := x.PatchNoProxy(context.Background(), exposeRequest()); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("PatchNoProxy(expose request): %v", err)
	}
}
