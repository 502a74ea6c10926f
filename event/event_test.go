package event_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

var (
	observed   = time.Date(2026, 7, 22, 10, 0, 5, 123456789, time.FixedZone("CEST", 2*3600))
	transition = time.Date(2026, 7, 22, 7, 59, 0, 0, time.UTC)
	exampleHC  = &event.ClusterRef{Namespace: "clusters", Name: "example"}
)

// nodeEvent is the typical event of the benchmark and many tests: a hosted
// node of seed 000 going NotReady.
func nodeEvent(t testing.TB) event.Event {
	t.Helper()
	p := event.NodeReadiness{
		Node:               "example-sffhb-worker-7x2kq",
		Ready:              event.ConditionFalse,
		Reason:             "KubeletNotReady",
		Message:            "container runtime network not ready: NetworkReady=false",
		LastTransitionTime: transition,
		ProviderID:         "kubevirt://example-sffhb-worker-7x2kq",
		InternalIP:         "10.128.2.17",
	}
	obj := event.ObjectRef{
		Kind: "Node", Name: p.Node, UID: "5b0e7c6a-0c1f-4b8e-9d43-2b1f0e6f0a11",
		ResourceVersion: "184467", Hosted: true,
	}
	e, err := event.New("mgmt-east", exampleHC, obj, p, event.TransitionAt("Ready=False", p.LastTransitionTime), observed)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func TestNewFillsEnvelope(t *testing.T) {
	e := nodeEvent(t)
	if e.Version != event.Version || e.Type != event.TypeNode || e.Source != "mgmt-east" {
		t.Errorf("envelope = v%d %q %q", e.Version, e.Type, e.Source)
	}
	if e.Time.Location() != time.UTC || !e.Time.Equal(observed) {
		t.Errorf("Time = %v, want %v in UTC", e.Time, observed)
	}
	if len(e.ID) != 32 || strings.Trim(e.ID, "0123456789abcdef") != "" {
		t.Errorf("ID = %q, want 32 lower-case hex digits", e.ID)
	}
	if e.IsSnapshot() {
		t.Error("IsSnapshot() = true for a fresh event")
	}
	p, err := e.DecodePayload()
	if err != nil {
		t.Fatalf("DecodePayload: %v", err)
	}
	nr, ok := p.(event.NodeReadiness)
	if !ok || nr.Ready != event.ConditionFalse || !nr.LastTransitionTime.Equal(transition) {
		t.Errorf("payload = %#v", p)
	}
}

func TestNewCopiesCluster(t *testing.T) {
	c := event.ClusterRef{Namespace: "clusters", Name: "example"}
	e, err := event.New("mgmt", &c, event.ObjectRef{Kind: "HostedCluster", Name: "example"},
		event.Reachability{Endpoint: "api.example:6443", Reachable: true}, "reachable@x", observed)
	if err != nil {
		t.Fatal(err)
	}
	c.Name = "changed"
	if e.Cluster.Name != "example" {
		t.Errorf("event cluster follows the caller's variable: %v", e.Cluster)
	}
}

func TestNewRejects(t *testing.T) {
	obj := event.ObjectRef{Kind: "Node", Name: "n1"}
	p := event.NodeReadiness{Node: "n1", Ready: event.ConditionTrue}
	var nilPayload *event.NodeReadiness
	tests := []struct {
		name    string
		source  string
		cluster *event.ClusterRef
		obj     event.ObjectRef
		payload event.Payload
		key     string
		at      time.Time
		opts    []event.Option
	}{
		{name: "empty source", source: "", obj: obj, payload: p, key: "k", at: observed},
		{name: "upper-case source", source: "Mgmt", obj: obj, payload: p, key: "k", at: observed},
		{name: "source with space", source: "mgmt east", obj: obj, payload: p, key: "k", at: observed},
		{name: "bad cluster namespace", source: "mgmt", cluster: &event.ClusterRef{Namespace: "a.b", Name: "x"}, obj: obj, payload: p, key: "k", at: observed},
		{name: "empty cluster name", source: "mgmt", cluster: &event.ClusterRef{Namespace: "clusters"}, obj: obj, payload: p, key: "k", at: observed},
		{name: "object without kind", source: "mgmt", obj: event.ObjectRef{Name: "n1"}, payload: p, key: "k", at: observed},
		{name: "object without name or uid", source: "mgmt", obj: event.ObjectRef{Kind: "Node"}, payload: p, key: "k", at: observed},
		{name: "nil payload", source: "mgmt", obj: obj, payload: nil, key: "k", at: observed},
		{name: "nil pointer payload", source: "mgmt", obj: obj, payload: nilPayload, key: "k", at: observed},
		{name: "empty transition key", source: "mgmt", obj: obj, payload: p, key: "", at: observed},
		{name: "zero time", source: "mgmt", obj: obj, payload: p, key: "k", at: time.Time{}},
		{name: "bad snapshot run", source: "mgmt", obj: obj, payload: p, key: "k", at: observed, opts: []event.Option{event.WithSnapshot("run 1")}},
		{name: "snapshotdone without run", source: "mgmt", obj: obj, payload: event.SnapshotDone{}, key: "k", at: observed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := event.New(tt.source, tt.cluster, tt.obj, tt.payload, tt.key, tt.at, tt.opts...)
			if !errors.Is(err, event.ErrInvalid) {
				t.Errorf("New() error = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestNewAcceptsPointerPayload(t *testing.T) {
	p := &event.VirtLauncher{Pod: "virt-launcher-w1-abcde", VMI: "w1"}
	e, err := event.New("mgmt", exampleHC, event.ObjectRef{Kind: "Pod", Namespace: "clusters-example", Name: p.Pod}, p, "1", observed)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.DecodePayload()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, *p) {
		t.Errorf("payload = %#v, want %#v", got, *p)
	}
}

func TestRedaction(t *testing.T) {
	spec := event.ProxySpec{
		HTTPProxy:          "http://svc-user:s3cr3t@proxy.corp.example:3128",
		HTTPSProxy:         "user:p@ss/word@proxy.corp.example:3128", // no scheme, '@' and '/' in the password
		NoProxy:            ".corp.example,172.31.0.0/16",
		ReadinessEndpoints: []string{"https://probe:pw@check.corp.example/health", "http://plain.example"},
		TrustedCA:          "user-ca-bundle",
	}
	hc := event.HostedClusterState{
		Platform: "KubeVirt",
		Proxy:    spec,
		Conditions: []event.Condition{{
			Type: "Available", Status: event.ConditionFalse,
			Message: `dial via "http://svc-user:s3cr3t@proxy.corp.example:3128" failed`,
		}},
	}
	e, err := event.New("mgmt", exampleHC, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example"}, hc, "42", observed)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e.Payload), "s3cr3t") || strings.Contains(string(e.Payload), "word") || strings.Contains(string(e.Payload), ":pw@") {
		t.Errorf("credentials leaked into payload: %s", e.Payload)
	}
	p, err := e.DecodePayload()
	if err != nil {
		t.Fatal(err)
	}
	got := p.(event.HostedClusterState)
	want := event.ProxySpec{
		HTTPProxy:          "http://***@proxy.corp.example:3128",
		HTTPSProxy:         "***@proxy.corp.example:3128",
		NoProxy:            spec.NoProxy,
		ReadinessEndpoints: []string{"https://***@check.corp.example/health", "http://plain.example"},
		TrustedCA:          "user-ca-bundle",
	}
	if !reflect.DeepEqual(got.Proxy, want) {
		t.Errorf("proxy = %#v\nwant   %#v", got.Proxy, want)
	}
	if m := got.Conditions[0].Message; m != `dial via "http://***@proxy.corp.example:3128" failed` {
		t.Errorf("condition message = %q", m)
	}
	// The caller's values are left alone.
	if hc.Proxy.ReadinessEndpoints[0] != spec.ReadinessEndpoints[0] || !strings.Contains(hc.Conditions[0].Message, "s3cr3t") {
		t.Error("New modified the caller's payload")
	}
}

func TestDecodePayloadRedactsOldProducers(t *testing.T) {
	e := nodeEvent(t)
	e.Type = event.TypeOCPProxy
	e.Object = event.ObjectRef{Kind: "Proxy", Name: "cluster"}
	e.Cluster = nil
	e.Payload = json.RawMessage(`{"spec":{"httpProxy":"http://u:p@proxy:3128"},"status":{"httpsProxy":"http://u:p@proxy:3128"}}`)
	p, err := e.DecodePayload()
	if err != nil {
		t.Fatal(err)
	}
	op := p.(event.OpenShiftProxy)
	if op.Spec.HTTPProxy != "http://***@proxy:3128" || op.Status.HTTPSProxy != "http://***@proxy:3128" {
		t.Errorf("not redacted: %#v", op)
	}
}

func TestProxyChangeDiff(t *testing.T) {
	pc := event.ProxyChange{
		Target: event.ProxyTargetHostedCluster,
		Old:    event.ProxySpec{HTTPSProxy: "http://proxy:3128", NoProxy: ".corp.example, 172.31.0.0/16"},
		New:    event.ProxySpec{HTTPSProxy: "http://proxy:3128", NoProxy: "kubernetes,.corp.example,172.31.0.0/16,10.132.0.0/14,kubernetes,"},
		// Whatever the producer claims is replaced by the derived diff.
		NoProxyRemoved: []string{"bogus"},
	}
	e, err := event.New("mgmt", exampleHC, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example"}, pc, "43", observed)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := e.DecodePayload()
	got := p.(event.ProxyChange)
	if want := []string{"kubernetes", "10.132.0.0/14"}; !reflect.DeepEqual(got.NoProxyAdded, want) {
		t.Errorf("NoProxyAdded = %q, want %q", got.NoProxyAdded, want)
	}
	if got.NoProxyRemoved != nil {
		t.Errorf("NoProxyRemoved = %q, want none", got.NoProxyRemoved)
	}
}

func TestNoProxyEntries(t *testing.T) {
	got := event.ProxySpec{NoProxy: " kubernetes ,,.svc, 172.31.0.0/16,"}.NoProxyEntries()
	if want := []string{"kubernetes", ".svc", "172.31.0.0/16"}; !reflect.DeepEqual(got, want) {
		t.Errorf("NoProxyEntries = %q, want %q", got, want)
	}
	if got := (event.ProxySpec{}).NoProxyEntries(); got != nil {
		t.Errorf("NoProxyEntries of empty = %q", got)
	}
}

func TestDetectSignature(t *testing.T) {
	tests := []struct {
		msg  string
		want event.Signature
	}{
		{"F0603 19:38:28.981007       1 cmd.go:162] failed checking apiserver connectivity: client rate limiter Wait returned an error: context deadline exceeded - error from a previous attempt: read tcp 172.40.0.7:40588->172.50.0.1:443: read: connection reset by peer", event.SignatureAPIServerConnectivity},
		{"failed checking apiserver connectivity: Get \"https://172.31.0.1:443/\": x509: certificate signed by unknown authority", event.SignatureAPIServerConnectivity},
		{"Get \"https://quay.io/v2/\": proxyconnect tcp: dial tcp 192.168.201.2:3128: connect: connection refused", event.SignatureProxyConnect},
		{"got unexpected statuscode 403 to CONNECT request", event.SignatureProxyConnect},
		{"failed to establish a connection through http connect", event.SignatureProxyConnect},
		{"tls: failed to verify certificate: x509: certificate signed by unknown authority", event.SignatureUnknownAuthority},
		{"panic: runtime error: index out of range", event.SignatureNone},
		{"", event.SignatureNone},
	}
	for _, tt := range tests {
		if got := event.DetectSignature(tt.msg); got != tt.want {
			t.Errorf("DetectSignature(%.60q) = %q, want %q", tt.msg, got, tt.want)
		}
	}
}

func TestCrashLoopSignatureAndBounds(t *testing.T) {
	fatal := "F0603 19:38:28.981007 1 cmd.go:162] failed checking apiserver connectivity: context deadline exceeded"
	// A long log tail whose fatal line is at the end, with the signature
	// text also pushed beyond the bound by a multi-byte prefix.
	msg := strings.Repeat("I0603 réessai http://u:pw@proxy:3128 …\n", 400) + fatal
	pc := event.PodCrashLoop{
		Namespace: "openshift-service-ca-operator", Pod: "service-ca-operator-6d9f-abcde",
		Container: "service-ca-operator", RestartCount: 7, WaitingReason: "CrashLoopBackOff",
		LastTerminationMessage: msg, ExitCode: 255, FinishedAt: transition,
	}
	e, err := event.New("mgmt", exampleHC, event.ObjectRef{Kind: "Pod", Namespace: pc.Namespace, Name: pc.Pod, Hosted: true}, pc, "service-ca-operator/7", observed)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := e.DecodePayload()
	got := p.(event.PodCrashLoop)
	if got.Signature != event.SignatureAPIServerConnectivity {
		t.Errorf("Signature = %q", got.Signature)
	}
	m := got.LastTerminationMessage
	if !strings.HasSuffix(m, fatal) || !strings.HasPrefix(m, "…") || len(m) > 4096+len("…") {
		t.Errorf("message not cut from the front to 4 KiB: len %d, starts %.20q", len(m), m)
	}
	if strings.Contains(m, ":pw@") {
		t.Error("credentials in termination message")
	}
	if !json.Valid(e.Payload) || strings.ContainsRune(m, '\uFFFD') {
		t.Error("truncation split a multi-byte character")
	}
}

func TestClusterRefParse(t *testing.T) {
	c, err := event.ParseClusterRef("clusters/example.dev")
	if err != nil || c != (event.ClusterRef{Namespace: "clusters", Name: "example.dev"}) {
		t.Fatalf("ParseClusterRef = %v, %v", c, err)
	}
	if c.String() != "clusters/example.dev" {
		t.Errorf("String() = %q", c.String())
	}
	for _, bad := range []string{"", "clusters", "/example", "clusters/", "clus.ters/example", "clusters/Example", "a/b/c"} {
		if _, err := event.ParseClusterRef(bad); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("ParseClusterRef(%q) error = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestTypes(t *testing.T) {
	seen := map[event.Type]bool{}
	for _, typ := range event.Types() {
		if !typ.Known() || seen[typ] {
			t.Errorf("type %q unknown or listed twice", typ)
		}
		seen[typ] = true
		f, err := event.SubjectFilter("", nil, typ)
		if err != nil || !strings.HasSuffix(f, "."+string(typ)) {
			t.Errorf("type %q is not a subject token: %q, %v", typ, f, err)
		}
	}
	if event.Type("bogus").Known() {
		t.Error("unknown type reported known")
	}
}

func TestSnapshotDone(t *testing.T) {
	started := observed.Add(-time.Minute)
	e, err := event.NewSnapshotDone("mgmt", "agent-0@1", nil, event.SnapshotDone{Started: started, Count: 12, Types: []event.Type{event.TypeNode}}, observed)
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != event.TypeSnapshotDone || e.Snapshot != "agent-0@1" || e.Cluster != nil || e.Object.Kind != event.SourceKind {
		t.Errorf("envelope = %+v", e)
	}
	subj, err := event.Subject(e)
	if err != nil || subj != "hcpbot.events.mgmt._._.snapshotdone" {
		t.Errorf("Subject = %q, %v", subj, err)
	}
	if _, err := event.NewSnapshotDone("mgmt", "", nil, event.SnapshotDone{}, observed); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("empty run: error = %v, want ErrInvalid", err)
	}
	if _, err := event.NewSnapshotDone("mgmt", "r", nil, event.SnapshotDone{Count: -1}, observed); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("negative count: error = %v, want ErrInvalid", err)
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	e := nodeEvent(t)
	e.Version = 2
	if _, err := event.Encode(e); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("Encode(v2) error = %v, want ErrInvalid", err)
	}
	e = nodeEvent(t)
	e.Payload = json.RawMessage(`{"message":"` + strings.Repeat("x", event.MaxSize) + `"}`)
	if _, err := event.Encode(e); !errors.Is(err, event.ErrTooLarge) {
		t.Errorf("Encode(huge) error = %v, want ErrTooLarge", err)
	}
	e = nodeEvent(t)
	e.Payload = json.RawMessage(`{"message":`)
	if _, err := event.Encode(e); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("Encode(truncated payload) error = %v, want ErrInvalid", err)
	}
}
