//go:build chaos

package approval

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// With the chaos tag, a process whose HCPBOT_CHAOS_DIR holds the file
// pause-<point> takes it (removing it, so that one process of several
// does) when it reaches that point, writes paused-<point>-<pid> naming the
// action, and stops there for good: the test then SIGKILLs it at exactly
// that point. Release builds have none of this (chaos.go).
func init() {
	dir := os.Getenv(chaosPointsEnvVar)
	if dir == "" {
		return
	}
	chaosPoint = func(point, id string) {
		if os.Remove(filepath.Join(dir, "pause-"+point)) != nil {
			return
		}
		name := filepath.Join(dir, "paused-"+point+"-"+strconv.Itoa(os.Getpid()))
		_ = os.WriteFile(name, []byte(id), 0o600)
		fmt.Fprintf(os.Stderr, "hcpbot chaos: paused at %s of %s\n", point, id)
		select {}
	}
}
