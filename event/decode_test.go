package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// validJSON is an encoded node event, written out so the test also pins the
// wire format.
const validJSON = `{"v":1,"id":"8a220df4a6331abc4eaf42db191ebe62","type":"node","time":"2026-07-22T08:00:05.123456789Z","source":"mgmt-east","cluster":{"namespace":"clusters","name":"example"},"object":{"kind":"Node","name":"example-sffhb-worker-7x2kq","uid":"5b0e7c6a-0c1f-4b8e-9d43-2b1f0e6f0a11","resourceVersion":"184467","hosted":true},"payload":{"node":"example-sffhb-worker-7x2kq","ready":"False","reason":"KubeletNotReady","message":"container runtime network not ready: NetworkReady=false","lastTransitionTime":"2026-07-22T07:59:00Z","providerID":"kubevirt://example-sffhb-worker-7x2kq","internalIP":"10.128.2.17"}}`

func TestEncodeWireFormat(t *testing.T) {
	data, err := event.Encode(nodeEvent(t))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != validJSON {
		t.Errorf("Encode =\n%s\nwant\n%s", data, validJSON)
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	want := nodeEvent(t)
	got, err := event.Decode([]byte(validJSON))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode =\n%+v\nwant\n%+v", got, want)
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	data := []byte(validJSON)
	e, err := event.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	before := string(e.Payload)
	for i := range data {
		data[i] = 'x'
	}
	if string(e.Payload) != before {
		t.Error("decoded payload aliases the input buffer")
	}
}

// edit returns validJSON with the envelope changed by f.
func edit(t *testing.T, f func(m map[string]any)) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(validJSON), &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name         string
		data         string
		want         error
		wantEnvelope bool // the envelope comes back for logging
	}{
		{"empty", "", event.ErrMalformed, false},
		{"not JSON", "hello", event.ErrMalformed, false},
		{"JSON array", "[1,2]", event.ErrMalformed, false},
		{"JSON null", "null", event.ErrMalformed, false},
		{"truncated", validJSON[:len(validJSON)/2], event.ErrMalformed, false},
		{"trailing garbage", validJSON + "}", event.ErrMalformed, false},
		{"missing v", edit(t, func(m map[string]any) { delete(m, "v") }), event.ErrMalformed, false},
		{"v zero", edit(t, func(m map[string]any) { m["v"] = 0 }), event.ErrMalformed, false},
		{"v not a number", edit(t, func(m map[string]any) { m["v"] = "1" }), event.ErrMalformed, false},
		{"missing id", edit(t, func(m map[string]any) { delete(m, "id") }), event.ErrMalformed, false},
		{"id with space", edit(t, func(m map[string]any) { m["id"] = "a b" }), event.ErrMalformed, false},
		{"missing type", edit(t, func(m map[string]any) { delete(m, "type") }), event.ErrMalformed, false},
		{"type with dot", edit(t, func(m map[string]any) { m["type"] = "node.x" }), event.ErrMalformed, false},
		{"missing source", edit(t, func(m map[string]any) { delete(m, "source") }), event.ErrMalformed, false},
		{"bad source", edit(t, func(m map[string]any) { m["source"] = "mgmt.*" }), event.ErrMalformed, false},
		{"missing time", edit(t, func(m map[string]any) { delete(m, "time") }), event.ErrMalformed, false},
		{"bad time", edit(t, func(m map[string]any) { m["time"] = "yesterday" }), event.ErrMalformed, false},
		{"empty cluster", edit(t, func(m map[string]any) { m["cluster"] = map[string]any{} }), event.ErrMalformed, false},
		{"object without kind", edit(t, func(m map[string]any) { m["object"] = map[string]any{"name": "x"} }), event.ErrMalformed, false},
		{"missing payload", edit(t, func(m map[string]any) { delete(m, "payload") }), event.ErrMalformed, false},
		{"null payload", edit(t, func(m map[string]any) { m["payload"] = nil }), event.ErrMalformed, false},
		{"array payload", edit(t, func(m map[string]any) { m["payload"] = []any{} }), event.ErrMalformed, false},
		{"payload field of wrong type", edit(t, func(m map[string]any) { m["payload"] = map[string]any{"node": 7} }), event.ErrMalformed, false},
		{"payload bad time", edit(t, func(m map[string]any) {
			m["payload"] = map[string]any{"lastTransitionTime": "never"}
		}), event.ErrMalformed, false},
		{"snapshotdone without run", edit(t, func(m map[string]any) {
			m["type"] = "snapshotdone"
			delete(m, "cluster")
		}), event.ErrMalformed, false},
		{"newer major", edit(t, func(m map[string]any) { m["v"] = 2 }), event.ErrUnsupportedVersion, true},
		{"newer major, reshaped", `{"v":2,"id":{"new":"shape"},"type":["x"]}`, event.ErrUnsupportedVersion, false},
		{"unknown type", edit(t, func(m map[string]any) { m["type"] = "futuretype" }), event.ErrUnknownType, true},
		{"huge", `{"v":1,"pad":"` + strings.Repeat("x", event.MaxSize) + `"}`, event.ErrTooLarge, false},
	}
	sentinels := []error{event.ErrMalformed, event.ErrUnsupportedVersion, event.ErrUnknownType, event.ErrTooLarge, event.ErrInvalid}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := event.Decode([]byte(tt.data))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode error = %v, want %v", err, tt.want)
			}
			for _, s := range sentinels {
				if s != tt.want && errors.Is(err, s) {
					t.Errorf("error %v also matches %v", err, s)
				}
			}
			if tt.wantEnvelope && (e.ID == "" || e.Source == "") {
				t.Errorf("envelope not returned: %+v", e)
			}
		})
	}
}

func TestDecodeIgnoresUnknownFields(t *testing.T) {
	data := edit(t, func(m map[string]any) {
		m["traceparent"] = "00-abc-def-01"
		m["object"].(map[string]any)["apiVersion"] = "v1"
		m["payload"].(map[string]any)["kubeletVersion"] = "v1.37.2"
	})
	got, err := event.Decode([]byte(data))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	p, err := got.DecodePayload()
	if err != nil || p.(event.NodeReadiness).Ready != event.ConditionFalse {
		t.Errorf("payload = %+v, %v", p, err)
	}
	// Unknown payload fields are kept so a relay loses nothing.
	if !bytes.Contains(got.Payload, []byte("kubeletVersion")) {
		t.Error("unknown payload field dropped")
	}
}

func TestDecodeAtSizeLimit(t *testing.T) {
	base := edit(t, func(m map[string]any) { m["pad"] = "" })
	pad := event.MaxSize - len(base)
	data := strings.Replace(base, `"pad":""`, `"pad":"`+strings.Repeat("x", pad)+`"`, 1)
	if len(data) != event.MaxSize {
		t.Fatalf("test data is %d bytes", len(data))
	}
	if _, err := event.Decode([]byte(data)); err != nil {
		t.Errorf("Decode at exactly MaxSize: %v", err)
	}
	if _, err := event.Decode([]byte(data + " ")); !errors.Is(err, event.ErrTooLarge) {
		t.Errorf("Decode at MaxSize+1: %v, want ErrTooLarge", err)
	}
}

func TestDecodePayloadUnknownType(t *testing.T) {
	e := nodeEvent(t)
	e.Type = "futuretype"
	if _, err := e.DecodePayload(); !errors.Is(err, event.ErrUnknownType) {
		t.Errorf("DecodePayload error = %v, want ErrUnknownType", err)
	}
}

func TestEveryTypeRoundTrips(t *testing.T) {
	replicas := int32(3)
	payloads := []event.Payload{
		event.HostedClusterState{Platform: "KubeVirt", InfraID: "example-sffhb", Version: "4.18.3",
			Proxy:          event.ProxySpec{HTTPSProxy: "http://192.168.201.2:3128", NoProxy: "192.168.201.0/24", TrustedCA: "user-ca-bundle"},
			ClusterNetwork: []string{"10.132.0.0/14"}, ServiceNetwork: []string{"172.31.0.0/16"},
			ControlPlaneEndpoint: &event.Endpoint{Host: "api.example.corp", Port: 443}, KubeconfigSecret: "example-admin-kubeconfig",
			PausedUntil: "true", Generation: 4,
			Conditions: []event.Condition{{Type: "Available", Status: event.ConditionTrue, LastTransitionTime: transition, ObservedGeneration: 4}}},
		event.ProxyChange{Target: event.ProxyTargetOpenShift, New: event.ProxySpec{NoProxy: "kubernetes"},
			NoProxyAdded: []string{"kubernetes"}}, // derived, but spelt out so the payload compares equal
		event.NodePoolState{Name: "workers", ClusterName: "example", Replicas: &replicas, CurrentReplicas: 2, PausedUntil: "2026-12-07T00:00:00Z",
			Conditions: []event.Condition{{Type: "AllNodesHealthy", Status: event.ConditionFalse, Severity: "Warning"}}},
		event.NodeReadiness{Node: "w1", Ready: event.ConditionUnknown},
		event.NodeReadiness{Node: "w2", Ready: event.ConditionUnknown, NotJoining: true, Created: transition},
		event.PodCrashLoop{Namespace: "ns", Pod: "p", Container: "c", RestartCount: 1, Cleared: true},
		event.KubeAPIServerProxy{Pod: "kube-apiserver-proxy-w1", Node: "w1", Mode: event.ProxyModeTunnel, ConnectFailure: true,
			ConnectMessage: "got unexpected statuscode 403 to CONNECT request"},
		event.VirtLauncher{Pod: "virt-launcher-w1-x", VMI: "w1", PodIP: "10.128.2.17", Phase: "Running"},
		event.Reachability{Endpoint: "api.example.corp:443", Error: "dial tcp: i/o timeout", Since: transition},
		event.OpenShiftProxy{Spec: event.ProxySpec{HTTPProxy: "http://proxy:3128"}, Status: event.ProxyStatus{NoProxy: ".cluster.local"}},
		event.SnapshotDone{Started: transition, Count: 9, Types: []event.Type{event.TypeNode}},
		event.NodeSummary{Total: 2000, Ready: 1990, NotReady: 4, Unknown: 1, Joining: 3, NotJoining: 2, JoinGrace: 10 * time.Minute, Cordoned: 5},
		event.APIServiceState{Name: "v1.apps.openshift.io", Service: "default/openshift-apiserver", Available: event.ConditionFalse,
			Reason: "FailedDiscoveryCheck", LastTransitionTime: transition},
		event.ConnectivityCheck{LastSucceeded: transition, Stale: true, StaleAfter: 5 * time.Minute, ObservedAt: transition.Add(time.Hour)},
	}
	if len(payloads) != len(event.Types())+1 { // two NodeReadiness shapes
		t.Fatalf("test covers %d types, package has %d", len(payloads), len(event.Types()))
	}
	for _, p := range payloads {
		t.Run(string(p.EventType()), func(t *testing.T) {
			var (
				e   event.Event
				err error
			)
			if sd, ok := p.(event.SnapshotDone); ok {
				e, err = event.NewSnapshotDone("mgmt", "run-1", nil, sd, observed)
			} else {
				e, err = event.New("mgmt", exampleHC, event.ObjectRef{Kind: "X", Name: "x"}, p, "k", observed)
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := event.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			d, err := event.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.DecodePayload()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, p) {
				t.Errorf("payload =\n%#v\nwant\n%#v", got, p)
			}
		})
	}
}
