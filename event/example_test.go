package event_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// The agent builds an event, encodes it and publishes it on its subject
// with the ID as Nats-Msg-Id.
func Example_publish() {
	ltt := time.Date(2026, 7, 22, 7, 59, 0, 0, time.UTC)
	p := event.NodeReadiness{Node: "example-sffhb-worker-7x2kq", Ready: event.ConditionFalse, LastTransitionTime: ltt}
	obj := event.ObjectRef{Kind: "Node", Name: p.Node, UID: "5b0e7c6a-0c1f-4b8e-9d43-2b1f0e6f0a11", Hosted: true}
	cluster := &event.ClusterRef{Namespace: "clusters", Name: "example"}

	e, err := event.New("mgmt.east", cluster, obj, p, event.TransitionAt("Ready=False", ltt), time.Now())
	if err != nil {
		panic(err)
	}
	data, err := event.Encode(e)
	if err != nil {
		panic(err)
	}
	subject, err := event.Subject(e)
	if err != nil {
		panic(err)
	}
	// js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data,
	//	Header: nats.Header{"Nats-Msg-Id": {e.ID}}})
	_ = data
	fmt.Println(subject)
	fmt.Println(e.ID)
	// Output:
	// hcpbot.events.mgmt~east.clusters.example.node
	// d80a245b6a44d91115d97ebb65e8e808
}

// The bot decodes each message and decides between handling it,
// dead-lettering it and dropping it.
func ExampleDecode() {
	data := []byte(`{"v":2,"id":"x","type":"node","source":"mgmt"}`)

	e, err := event.Decode(data)
	switch {
	case errors.Is(err, event.ErrUnknownType), errors.Is(err, event.ErrUnsupportedVersion):
		fmt.Println("dead-letter for a newer consumer:", err)
	case err != nil:
		fmt.Println("dead-letter and alert:", err)
	default:
		p, _ := e.DecodePayload() // cannot fail after Decode succeeded
		switch p := p.(type) {
		case event.NodeReadiness:
			fmt.Println(p.Node, p.Ready)
		}
	}
	// Output:
	// dead-letter for a newer consumer: event: unsupported version: v 2, this build reads up to 1
}
