package actions

import (
	"strings"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
)

// RequestSubject is where the bot sends action requests for the agent of
// source, hcpbot.actions.<source>.request ('.' in source escaped as in
// every subject, event.SourceToken): the subjects of the actions stream
// (bus.ActionsStreamSubjects) with source in place of the wildcard, so
// that every request is stored there and an agent's NATS permission on
// its own subject covers nobody else's.
func RequestSubject(source string) (string, error) {
	tok, err := event.SourceToken(source)
	if err != nil {
		return "", err
	}
	return strings.Replace(bus.ActionsStreamSubjects, "*", tok, 1), nil
}
