package event_test

import (
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

func TestID(t *testing.T) {
	obj := event.ObjectRef{Kind: "Node", Name: "w1", UID: "uid-1", ResourceVersion: "10", Hosted: true}
	p := event.NodeReadiness{Node: "w1", Ready: event.ConditionFalse}
	base := func(mod func(*idCase)) string {
		c := idCase{source: "mgmt", cluster: exampleHC, obj: obj, payload: p, key: "Ready=False@2026-07-22T07:59:00Z", at: observed}
		if mod != nil {
			mod(&c)
		}
		e, err := event.New(c.source, c.cluster, c.obj, c.payload, c.key, c.at, c.opts...)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return e.ID
	}
	ref := base(nil)

	same := []struct {
		name string
		mod  func(*idCase)
	}{
		{"observed later by another agent", func(c *idCase) { c.at = observed.Add(time.Hour) }},
		{"payload details differ", func(c *idCase) {
			c.payload = event.NodeReadiness{Node: "w1", Ready: event.ConditionFalse, Message: "other"}
		}},
		{"resourceVersion differs", func(c *idCase) { c.obj.ResourceVersion = "11" }},
		{"name differs but uid equal", func(c *idCase) { c.obj.Name = "renamed" }},
	}
	for _, tt := range same {
		if got := base(tt.mod); got != ref {
			t.Errorf("%s: ID %s, want %s", tt.name, got, ref)
		}
	}

	different := []struct {
		name string
		mod  func(*idCase)
	}{
		{"transition key", func(c *idCase) { c.key = "Ready=True@2026-07-22T08:10:00Z" }},
		{"source", func(c *idCase) { c.source = "mgmt-west" }},
		{"cluster", func(c *idCase) { c.cluster = &event.ClusterRef{Namespace: "clusters", Name: "other"} }},
		{"no cluster", func(c *idCase) { c.cluster = nil }},
		{"type", func(c *idCase) { c.payload = event.VirtLauncher{Pod: "p"} }},
		{"uid", func(c *idCase) { c.obj.UID = "uid-2" }},
		{"no uid", func(c *idCase) { c.obj.UID = "" }},
		// A periodic or requested restatement is a fresh copy per run.
		{"restatement run-1", func(c *idCase) { c.opts = []event.Option{event.WithRestatement("run-1")} }},
		{"restatement run-2", func(c *idCase) { c.opts = []event.Option{event.WithRestatement("run-2")} }},
	}
	// A restated fact keeps the fact's ID, so JetStream drops the copy.
	if got := base(func(c *idCase) { c.opts = []event.Option{event.WithSnapshot("run-1")} }); got != ref {
		t.Errorf("snapshot run changed the ID: %s, want %s", got, ref)
	}
	seen := map[string]string{ref: "reference"}
	for _, tt := range different {
		got := base(tt.mod)
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: ID %s equals that of %s", tt.name, got, prev)
		}
		seen[got] = tt.name
	}

	// Without a UID, the name identifies the object, and the same name in
	// the hosted and the management cluster are different objects.
	noUID := func(mod func(*event.ObjectRef)) string {
		return base(func(c *idCase) {
			c.obj.UID = ""
			if mod != nil {
				mod(&c.obj)
			}
		})
	}
	if noUID(nil) == noUID(func(o *event.ObjectRef) { o.Hosted = false }) {
		t.Error("hosted and management object with the same name share an ID")
	}
	if noUID(nil) == noUID(func(o *event.ObjectRef) { o.Name = "w2" }) {
		t.Error("objects of different names share an ID")
	}
	if noUID(nil) != noUID(nil) {
		t.Error("ID not deterministic without uid")
	}
}

// Field boundaries must not shift: ("ab","c") and ("a","bc") differ.
func TestIDFieldsDoNotRunTogether(t *testing.T) {
	mk := func(ns, name string) string {
		e, err := event.New("mgmt", nil, event.ObjectRef{Kind: "Pod", Namespace: ns, Name: name}, event.VirtLauncher{Pod: name}, "1", observed)
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	if mk("ab", "c") == mk("a", "bc") {
		t.Error("ID ignores field boundaries")
	}
}

// The ID is part of the wire contract: a change here breaks deduplication
// between agents of different versions, so it must be deliberate.
func TestIDStable(t *testing.T) {
	const want = "8a220df4a6331abc4eaf42db191ebe62"
	got := nodeEvent(t).ID
	if got != want {
		t.Errorf("ID of the reference node event = %s, want %s; if the ID rule changed on purpose, update this and say so in the release notes", got, want)
	}
}

func TestTransitionAt(t *testing.T) {
	at := time.Date(2026, 7, 22, 9, 59, 0, 999_000_000, time.FixedZone("CEST", 2*3600))
	if got, want := event.TransitionAt("Ready=False", at), "Ready=False@2026-07-22T07:59:00Z"; got != want {
		t.Errorf("TransitionAt = %q, want %q", got, want)
	}
}

type idCase struct {
	source  string
	cluster *event.ClusterRef
	obj     event.ObjectRef
	payload event.Payload
	key     string
	at      time.Time
	opts    []event.Option
}
