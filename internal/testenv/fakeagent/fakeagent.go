// Package fakeagent is an agent for tests of what surrounds it: the real
// approval.Serve (the request, the seals, Permit, the answer) in front of
// an executor that reports every change as done without touching a
// cluster.
package fakeagent

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Executor reports each change applied: a noProxy patch as the merged
// value with its undo, an exposure on the node ports asked for (or
// 30080…), a rollback as rolled back. It counts what it ran.
type Executor struct {
	mu   sync.Mutex
	runs map[string]int
}

var _ approval.Executor = (*Executor)(nil)

// Execute implements approval.Executor.
func (x *Executor) Execute(_ context.Context, ch actions.Change) (*actions.Result, error) {
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	x.mu.Lock()
	if x.runs == nil {
		x.runs = map[string]int{}
	}
	x.runs[ch.ID]++
	x.mu.Unlock()
	res := &actions.Result{ActionID: ch.ID, Type: ch.Type, Outcome: actions.OutcomeApplied}
	switch ch.Type {
	case actions.TypeNoProxyPatch:
		after := strings.Join(append([]string{ch.NoProxy.Expected}, ch.NoProxy.Add...), ",")
		res.Before, res.After, res.Added = ch.NoProxy.Expected, after, ch.NoProxy.Add
		res.Summary = "Added " + strings.Join(ch.NoProxy.Add, ", ") + " to the noProxy."
		res.Diff = "-" + ch.NoProxy.Expected + "\n+" + after + "\n"
		res.Undo = &actions.Undo{ActionID: ch.ID, Type: ch.Type, Cluster: ch.Cluster,
			NoProxy: &actions.NoProxyUndo{Target: ch.NoProxy.Target, Previous: ch.NoProxy.Expected, Written: after}}
	case actions.TypeExposeNodePort:
		nodePort := int32(30080)
		if chosen := ch.Expose.ChosenNodePorts(); len(chosen) > 0 {
			nodePort = chosen[0]
		}
		res.Summary = "Exposed " + ch.Expose.Namespace + "/" + ch.Expose.Service
		res.Ports = []actions.ExposedPort{{Protocol: "TCP", Port: 8080, NodePort: nodePort}}
		res.Undo = &actions.Undo{ActionID: ch.ID, Type: ch.Type, Cluster: ch.Cluster, Expose: &actions.ExposeUndo{HostedNamespace: ch.Expose.Namespace}}
	case actions.TypeRollback:
		res.Outcome, res.Summary = actions.OutcomeRolledBack, "Rolled back "+ch.Rollback.Undo.ActionID+"."
	}
	return res, nil
}

// Observe implements approval.Executor: nothing is ever in place.
func (x *Executor) Observe(context.Context, actions.Change) (*actions.Result, bool, error) {
	return nil, false, nil
}

// RecordEvent implements approval.Executor: nothing is recorded.
func (x *Executor) RecordEvent(context.Context, actions.Change, *actions.Result, actions.Actors) error {
	return nil
}

// Runs is how often the change id ran.
func (x *Executor) Runs(id string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.runs[id]
}

// Serve runs the agent of source with x on js, trusting key, until the
// test ends.
func Serve(tb testing.TB, js approval.AgentJetStream, source, key string, x *Executor) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := approval.Serve(ctx, js, approval.AgentConfig{Source: source, Executor: x, Log: natstest.Logger(tb),
			Trust: approval.Trust{Keys: []string{key}}}); err != nil {
			tb.Errorf("fakeagent: %v", err)
		}
	}()
	tb.Cleanup(func() { cancel(); <-done })
}
