package approval

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// leaderKV.Get answers as jetstream's KeyValue.Get does (value, revision,
// a deleted, purged or absent key), and by the leader's API only: not
// one direct get goes out.
func TestLeaderKVGetsAsKeyValueDoes(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: t.Name()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv, err := bus.EnsureKV(ctx, conn.JS, bus.ProposalsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	direct, leader := watchRequests(t, conn.NC, "$JS.API.DIRECT.GET.KV_"+bus.ProposalsBucket+".>"), watchRequests(t, conn.NC, "$JS.API.STREAM.MSG.GET.KV_"+bus.ProposalsBucket)
	for _, step := range []func() error{
		func() error { _, err := kv.Put(ctx, "a1", []byte(`{"v":1}`)); return err },
		func() error { _, err := kv.Put(ctx, "a1", []byte(`{"v":2}`)); return err },
		func() error { _, err := kv.Put(ctx, "gone", []byte(`x`)); return err },
		func() error { return kv.Delete(ctx, "gone") },
		func() error { _, err := kv.Put(ctx, "purged", []byte(`x`)); return err },
		func() error { return kv.Purge(ctx, "purged") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	l := leaderKV{KeyValue: kv, nc: conn.NC, bucket: bus.ProposalsBucket}
	for _, key := range []string{"a1", "gone", "purged", "never"} {
		want, werr := kv.Get(ctx, key)
		got, gerr := l.Get(ctx, key)
		switch {
		case werr != nil || gerr != nil:
			if !errors.Is(gerr, werr) {
				t.Errorf("%s: leader Get error %v, KeyValue.Get %v", key, gerr, werr)
			}
		case !bytes.Equal(got.Value(), want.Value()) || got.Revision() != want.Revision() || got.Key() != want.Key() || !got.Created().Equal(want.Created()):
			t.Errorf("%s: leader Get %q rev %d at %v, KeyValue.Get %q rev %d at %v", key, got.Value(), got.Revision(), got.Created(), want.Value(), want.Revision(), want.Created())
		}
	}
	before := direct()
	for _, key := range []string{"a1", "gone", "never"} {
		_, _ = l.Get(ctx, key)
	}
	if n := direct() - before; n != 0 {
		t.Errorf("%d direct gets made by the leader's reads", n)
	}
	if leader() < 3 {
		t.Errorf("%d leader reads seen, want 3 or more", leader())
	}
}

// watchRequests counts the requests published on subject.
func watchRequests(t *testing.T, nc *nats.Conn, subject string) (count func() int) {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n := 0
	return func() int {
		// Requests reach this subscriber before their answer reaches the
		// requester: what was asked has been delivered once Flush returns.
		_ = nc.Flush()
		for {
			select {
			case <-ch:
				n++
			default:
				return n
			}
		}
	}
}
