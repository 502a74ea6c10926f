package main

import (
	"io"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/fleet"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/partition"
)

// With one bot group the commands and the digest read the local bot, and
// nothing of the fleet runs (no subscription, no subject); with more, the
// fleet's client and server, which need the signing key.
func TestBotFleetWiring(t *testing.T) {
	l, err := bus.StartLocal(t.Context(), bus.LocalConfig{StoreDir: t.TempDir()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Shutdown)
	conn, err := l.Connect(t.Context(), bus.BotRole(), bus.Config{Name: "bot"}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &configs.Config{Approvals: &configs.Approvals{}}
	b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())

	one := partition.Set{}.ID(0)
	reader, run, err := botFleet(cfg, one, partition.Set{}, conn, signer, b, zerolog.Nop())
	if err != nil || reader != b || run != nil {
		t.Errorf("one group: reader %T, run %v, err %v; want the bot itself and nothing to run", reader, run != nil, err)
	}
	two := partition.ID{Index: 1, Count: 2}
	reader, run, err = botFleet(cfg, two, partition.Set{Count: 2}, conn, signer, b, zerolog.Nop())
	if _, isFleet := reader.(*fleet.Client); err != nil || !isFleet || run == nil {
		t.Errorf("group 1 of 2: reader %T, run %v, err %v; want the fleet's client and server", reader, run != nil, err)
	}
	if _, _, err := botFleet(cfg, two, partition.Set{Count: 2}, conn, nil, b, zerolog.Nop()); err == nil {
		t.Error("group 1 of 2 without a signing key: no error")
	}
}
