// Package natstest runs real NATS JetStream servers inside tests: one
// server, or a cluster whose nodes can be stopped and brought back.
// Everything listens on 127.0.0.1, keeps its data under tb.TempDir(), and
// is shut down by tb.Cleanup.
//
//	srv := natstest.RunServer(t)
//	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
//
//	c := natstest.RunCluster(t, 3)
//	conn, err := bus.Connect(ctx, bus.Config{URLs: c.URLs()}, natstest.Logger(t))
//	// create an R3 stream, then:
//	leader := c.WaitForStreamLeader("EVENTS")
//	c.Stop(leader)    // the client fails over, a new leader is elected
//	c.Restart(leader) // same ports, same store: the node catches up
//	c.WaitForStreamCurrent(leader, "EVENTS")
//
// ServerBinary builds (once, into the per-user testenv cache) a nats-server
// executable of go.mod's version, for tests that run server processes from
// a rendered configuration (configs/deploy TestDeployAsShipped).
//
// The helpers wait by polling with deadlines and fail the test through tb
// when a deadline passes; they are meant for the test's own goroutine.
package natstest
