package actions_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
)

// The request subject (moved here from event's TestSourceSubjects with
// its assertions): one per source, inside the actions stream's subjects.
func TestRequestSubject(t *testing.T) {
	if got, err := actions.RequestSubject("mgmt.corp"); err != nil || got != "hcpbot.actions.mgmt~corp.request" {
		t.Errorf("got %q, %v; want %q", got, err, "hcpbot.actions.mgmt~corp.request")
	}
	if got, err := actions.RequestSubject("*"); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("wildcard source: got %q, %v; want ErrInvalid", got, err)
	}
	if bus.ActionsStreamSubjects != "hcpbot.actions.*.request" {
		t.Error("stream or filter constants changed")
	}
	for _, source := range []string{"mgmt-1", "mgmt.corp"} {
		s, err := actions.RequestSubject(source)
		if err != nil || !server.SubjectsCollide(s, bus.ActionsStreamSubjects) || !server.IsValidLiteralSubject(s) {
			t.Errorf("RequestSubject(%q) = %q, %v: want a literal subject of the actions stream", source, s, err)
		}
	}
}
