package approval

// chaosPoint is called where the agent's handling of a request can be cut
// by a crash: before the write, after it (before the answer is recorded),
// and after the answer (before the acknowledgement). It does nothing
// unless the binary is built with the chaos tag (chaos_on.go), for the
// kill-during-execution test.
var chaosPoint = func(point, id string) {}

// The points of chaosPoint.
const (
	ChaosBeforeWrite  = "before-write"
	ChaosAfterWrite   = "after-write"
	ChaosAfterAnswer  = "after-answer"
	chaosPointsEnvVar = "HCPBOT_CHAOS_DIR"
)
