package bus

import "testing"

// SyncAlways reaches the server: JetStream fsyncs every write (what the
// deploy's nats.conf says with sync_interval: always); off by default.
func TestEmbeddedSyncAlways(t *testing.T) {
	for _, want := range []bool{false, true} {
		e, err := StartEmbedded(testContext(t), EmbeddedConfig{StoreDir: t.TempDir(), SyncAlways: want, Open: true, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		got := e.Server().JetStreamConfig().SyncAlways
		e.Shutdown()
		if got != want {
			t.Errorf("SyncAlways %v: the server runs with %v", want, got)
		}
	}
}
