package event

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// decodeWhole is DecodeAll without the split: the reference it must equal.
func decodeWhole(t *testing.T, data []byte) (Event, Payload, bool) {
	t.Helper()
	var e Event
	if json.Unmarshal(data, &e) != nil {
		return Event{}, nil, false
	}
	e, p, err := checked(e)
	return e, p, err == nil
}

// TestSplitDecodeAgrees: decoding an event split at its payload gives
// what decoding it whole gives, and inputs the split would misread decode
// whole.
func TestSplitDecodeAgrees(t *testing.T) {
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
	}
	for _, in := range inputs {
		got, gp, gerr := DecodeAll([]byte(in))
		want, wp, ok := decodeWhole(t, []byte(in))
		if ok != (gerr == nil) {
			t.Errorf("%s: DecodeAll error %v, whole decode ok=%v", in, gerr, ok)
			continue
		}
		if ok && (!reflect.DeepEqual(got, want) || !reflect.DeepEqual(gp, wp)) {
			t.Errorf("%s:\nsplit %+v %+v\nwhole %+v %+v", in, got, gp, want, wp)
		}
	}
}
