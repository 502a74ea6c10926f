package bot_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// rootLookups is a notifier that counts the bot's root look-ups per Key
// and forwards everything to the real one.
type rootLookups struct {
	notify.Notifier
	mu     sync.Mutex
	looked map[string]int
}

func (r *rootLookups) HasRoot(ctx context.Context, key string) (bool, error) {
	r.mu.Lock()
	r.looked[key]++
	r.mu.Unlock()
	return r.Notifier.(notify.RootChecker).HasRoot(ctx, key)
}

func (r *rootLookups) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.looked[key]
}

// A leader asks whether an incident already has a message only when
// another replica could have posted it: for the incidents it holds when
// it takes over (and those opened by events stored before, which a
// lagging replica applies later), never for one opened by an event stored
// after it held the lease. That look-up was a store round trip on the way
// of every new incident's first message (B2, docs/performance.md).
func TestLiveIncidentsAreNotLookedUp(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	const source, ns = "mgmt-live", "clusters"
	var leading atomic.Bool
	cfg := testConfig()
	cfg.Leader = leading.Load
	var lookups *rootLookups
	r := runBot(t, js, rec, cfg, nil, func(n notify.Notifier) notify.Notifier {
		lookups = &rootLookups{Notifier: n, looked: map[string]int{}}
		return lookups
	})
	keyOf := func(name string) string {
		for _, inc := range r.bot.Incidents() {
			if inc.Cluster.Cluster.Name == name {
				return inc.Key
			}
		}
		return ""
	}
	posted := func(name string) {
		t.Helper()
		rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
			for _, m := range roots(r) {
				if strings.Contains(m.Text, ns+"/"+name) {
					return true
				}
			}
			return false
		})
	}

	// Opened while this replica follows: another replica may have posted it.
	if err := scenario.Publish(ctx, js, nodeEvents(t, source, ns, "before", time.Now(), 3)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the follower holds the incident of before", func() bool { return keyOf("before") != "" })
	leading.Store(true)
	r.bot.LeaderChanged(true)
	posted("before")
	if n := lookups.count(keyOf("before")); n == 0 {
		t.Fatal("the incident the new leader took over was posted without looking for its message")
	}

	// Opened by an event stored after the lease was held: nobody else can
	// have posted it.
	if err := scenario.Publish(ctx, js, nodeEvents(t, source, ns, "after", time.Now(), 5)); err != nil {
		t.Fatal(err)
	}
	posted("after")
	if n := lookups.count(keyOf("after")); n != 0 {
		t.Fatalf("the incident opened while leading was looked up %d times", n)
	}
}

var _ notify.RootChecker = (*rootLookups)(nil)
