package event

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// decodeWhole is DecodeAll without the split: the reference it must equal.
func decodeWhole(data []byte) (Event, Payload, bool) {
	if len(data) > MaxSize {
		return Event{}, nil, false
	}
	var e Event
	if json.Unmarshal(data, &e) != nil {
		return Event{}, nil, false
	}
	e, p, err := checked(e)
	return e, p, err == nil
}

// splitInputs are events as Encode writes them and variants that the
// split must not misread.
func splitInputs(t testing.TB) []string {
	t.Helper()
	ref := ClusterRef{Namespace: "clusters", Name: "hc-1"}
	e, err := New("mgmt-1", &ref, ObjectRef{Kind: "Node", Name: "n1", Hosted: true},
		NodeReadiness{Node: "n1", Ready: ConditionFalse, Reason: "KubeletNotReady", Message: `runtime "network" not ready, payload: {}`},
		TransitionAt("Ready=False", time.Unix(1700000000, 0)), time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	s := string(enc)
	i := strings.Index(s, `,"payload":`)
	inputs := []string{
		s,
		// a nested member named payload before the real one
		strings.Replace(s, `"object":{`, `"object":{"x":{"a":1},"payload":{"k":1},`, 1),
		// an earlier top-level payload: the last wins
		s[:i] + `,"payload":{"node":"other"}` + s[i:],
		strings.Replace(s, `"id":`, `"Payload":{"node":"other"},"id":`, 1),
		// a member after the payload
		s[:len(s)-1] + `,"snapshot":"run-1"}`,
		// blanks around the payload
		s[:i] + `,"payload": ` + s[i+len(`,"payload":`):],
		// invalid payload JSON, null payload, unknown type
		s[:len(s)-2] + `,}}`,
		s[:i] + `,"payload":null}`,
		strings.Replace(s, `"type":"node"`, `"type":"future"`, 1),
		// the key inside a string of the envelope
		strings.Replace(s, `"kind":"Node"`, `"kind":"Node,\"payload\":{}"`, 1),
		// what encoding/json accepts and a stricter decoder might not, or
		// reads otherwise: names in another case, duplicates, invalid
		// UTF-8, escapes, nulls, numbers in other spellings
		strings.Replace(s, `"node":"n1"`, `"Node":"n2","NODE":"n3"`, 1),
		strings.Replace(s, `"source":"mgmt-1"`, `"source":"mgmt-1","source":"mgmt-2"`, 1),
		strings.Replace(s, `"reason":"KubeletNotReady"`, "\"reason\":\"Kubelet\xffNot\\u00e9\\ud800Ready\"", 1),
		strings.Replace(s, `"reason":"KubeletNotReady"`, `"reason":null,"notJoining":null`, 1),
		strings.Replace(s, `"v":1`, `"v":1.0`, 1),
		strings.Replace(s, `"v":1`, `"v":1e0`, 1),
		strings.Replace(s, `"v":1`, `"v":"1"`, 1),
		`{"v":1,"id":"0123456789abcdef0123456789abcdef","type":"crashloop","time":"2026-07-22T08:00:05+02:00","source":"m","cluster":{"namespace":"c","name":"h"},"object":{"kind":"Pod","namespace":"ns","name":"p"},"payload":{"namespace":"ns","pod":"p","container":"c","restartCount":12,"cleared":false}}`,
		`{"v":1,"id":"0123456789abcdef0123456789abcdef","type":"crashloop","time":"2026-07-22T08:00:05Z","source":"m","cluster":{"namespace":"c","name":"h"},"object":{"kind":"Pod","namespace":"ns","name":"p"},"payload":{"namespace":"ns","pod":"p","container":"c","restartCount":1e2}}`,
		`{"v":1,"id":"0123456789abcdef0123456789abcdef","type":"hostedcluster","time":"2026-07-22T08:00:05Z","source":"m","cluster":{"namespace":"c","name":"h"},"object":{"kind":"HostedCluster","namespace":"c","name":"h"},"payload":{"platform":"KubeVirt","proxy":{"httpsProxy":"http://u:p@proxy:3128","noProxy":"a,b"},"clusterNetwork":["10.132.0.0/14"],"serviceNetwork":null,"conditions":[{"type":"Available","status":"True","reason":"AsExpected","lastTransitionTime":"2026-07-22T07:00:00Z"}]}}`,
	}
	return inputs
}

// TestSplitDecodeAgrees: decoding an event split at its payload gives
// what decoding it whole gives, and inputs the split would misread decode
// whole.
func TestSplitDecodeAgrees(t *testing.T) {
	for _, in := range splitInputs(t) {
		if msg := splitDisagrees([]byte(in)); msg != "" {
			t.Error(msg)
		}
	}
}

// FuzzSplitAgrees: DecodeAll (the split, decoded with jsonv1) and the
// whole decode with encoding/json accept the same inputs and yield the
// same event and payload.
func FuzzSplitAgrees(f *testing.F) {
	for _, in := range splitInputs(f) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if msg := splitDisagrees(data); msg != "" {
			t.Fatal(msg)
		}
	})
}

func splitDisagrees(in []byte) string {
	got, gp, gerr := DecodeAll(in)
	want, wp, ok := decodeWhole(in)
	if ok != (gerr == nil) {
		return fmt.Sprintf("%q: DecodeAll error %v, whole decode ok=%v", in, gerr, ok)
	}
	if ok && (!reflect.DeepEqual(got, want) || !reflect.DeepEqual(gp, wp)) {
		return fmt.Sprintf("%q:\nsplit %+v %+v\nwhole %+v %+v", in, got, gp, want, wp)
	}
	return ""
}
