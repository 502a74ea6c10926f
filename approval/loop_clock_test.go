package approval_test

import (
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/approval"
)

// The loop paces its polls by the flow's own clock (Config.Now): with a
// clock an hour ahead of the machine's, as a test sets it, the outcome
// still comes within seconds, not at the next sweep.
func TestLoopPacesByItsClock(t *testing.T) {
	e := newEnv(t)
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Now, c.SweepInterval = ahead, time.Minute })
	e.serve(func(c *approval.AgentConfig) { c.Now = ahead })
	var got outcome
	start := time.Now()
	approved(t, f, &got)
	waitFor(t, 10*time.Second, "the outcome before the next sweep", func() bool { return len(got.got()) == 1 })
	t.Logf("outcome after %s", time.Since(start))
}
