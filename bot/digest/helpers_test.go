package digest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

var env *testenv.Env

// botBase is the smallest bot section configs accepts next to digests.
const botBase = "slack:\n  botTokenEnv: SLACK_BOT_TOKEN\n  signingSecretEnv: SLACK_SIGNING_SECRET\nbot:\n  defaultChannel: C0123456789\n"

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// digests parses a digests section the way the bot's config does, so the
// schedules are real cron schedules in their time zone.
func digests(t *testing.T, yaml string) []configs.Digest {
	t.Helper()
	c, err := configs.Parse([]byte(botBase+"digests:\n"+yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c.Digests
}

// recorder is a Notifier that keeps what it was asked to send.
type recorder struct {
	mu       sync.Mutex
	messages []notify.Message
	replies  []notify.Reply
}

func (r *recorder) Upsert(_ context.Context, m notify.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages = append(r.messages, m)
	return nil
}

func (r *recorder) Reply(_ context.Context, rp notify.Reply) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replies = append(r.replies, rp)
	return nil
}

func (r *recorder) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func (r *recorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.messages), len(r.replies)
}

// states is a fixed States.
type states []bot.ClusterState

func (s states) ClusterStates() []bot.ClusterState { return s }

// fireOnce fires tick of d on every runner at once and fails t unless
// exactly one of them posted.
func fireOnce(ctx context.Context, t *testing.T, d configs.Digest, tick time.Time, runners ...*digest.Runner) {
	t.Helper()
	posted := make([]bool, len(runners))
	var fire sync.WaitGroup
	for i, r := range runners {
		fire.Go(func() {
			ok, err := r.Fire(ctx, d, tick)
			if err != nil {
				t.Error(err)
			}
			posted[i] = ok
		})
	}
	fire.Wait()
	n := 0
	for _, ok := range posted {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("posted by %v, want exactly one replica", posted)
	}
}
