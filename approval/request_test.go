package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/actions"
)

// A port collision crosses the wire whole: the bot's error is a
// *PortCollisionError with the agent's ports and alternatives.
func TestPortCollisionAnswer(t *testing.T) {
	pc := &actions.PortCollisionError{NodePort: 30002, PortCollision: actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 30002, Reason: actions.PortAllocated, Holder: "other/holds"}, {NodePort: 40000, Reason: actions.PortOutOfRange}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{30004, 32767},
	}}
	for _, want := range []string{"30002 is already allocated in the management cluster (Service other/holds)", "40000 is outside the node-port range 30000-32767", "30004, 32767"} {
		if !strings.Contains(pc.Error(), want) {
			t.Errorf("%q does not say %q", pc.Error(), want)
		}
	}
	data, err := json.Marshal(failure("act-x0000001", fmt.Errorf("expose: %w", pc)))
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	back := r.Err()
	var got *actions.PortCollisionError
	if r.Code != CodePortCollision || !errors.Is(back, actions.ErrPortCollision) || !errors.As(back, &got) {
		t.Fatalf("answer %s: err %v", data, back)
	}
	if !reflect.DeepEqual(got.PortCollision, pc.PortCollision) || got.NodePort != 30002 || back.Error() != "expose: "+pc.Error() {
		t.Errorf("rebuilt %+v (%q), want %+v", got, back, pc)
	}
	// Recorded as an outcome and read back, likewise.
	p := Proposal{State: StateFailed, Code: r.Code, Reason: r.Error, Collision: r.Collision}
	if err := p.Failure(); !errors.As(err, &got) || !reflect.DeepEqual(got.PortCollision, pc.PortCollision) {
		t.Errorf("Failure() = %v", err)
	}
}

// Every code maps onto its sentinel and back; an unknown code (a newer
// agent) is an internal failure.
func TestCodes(t *testing.T) {
	for _, c := range codes {
		if got := CodeOf(fmt.Errorf("wrapped: %w", c.code.Err())); got != c.code {
			t.Errorf("CodeOf(%s.Err()) = %s", c.code, got)
		}
	}
	if !errors.Is(Code("from-the-future").Err(), ErrInternal) || CodeOf(errors.New("boom")) != CodeInternal {
		t.Error("unknown codes are not internal")
	}
}
