package command_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// clock is a settable time for caches.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// SlackProfiles reads the e-mail through slack-go's users.info against
// the recorder, as Slack answers it: kept for the TTL, read again after
// it; each profile that cannot stand for a person refused with
// ErrNoEmail; a missing scope named; no failure kept.
func TestSlackProfilesEmail(t *testing.T) {
	rec := slackrec.New(t)
	rec.AddUser(slackrec.User{ID: "U0ALICE123", Name: "alice", Email: "alice@corp.example"})
	rec.AddUser(slackrec.User{ID: "U0BOBBY123", Name: "bob", Email: "bob@corp.example", EmailUnconfirmed: true})
	rec.AddUser(slackrec.User{ID: "U0CAROL123", Name: "carol", Email: "carol@corp.example", Deleted: true})
	rec.AddUser(slackrec.User{ID: "U0NOMAIL12", Name: "nomail"})
	rec.AddUser(slackrec.User{ID: "U0SPACE123", Name: "space", Email: "dave @corp.example"})
	clk := &clock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
	p := &command.SlackProfiles{Client: notify.NewSlackClient("xoxb-profiles", rec.APIURL(), nil), Now: clk.now}
	ctx := context.Background()
	reads := func() int { return len(rec.CallsTo("users.info")) }

	if e, err := p.Email(ctx, "U0ALICE123"); err != nil || e != "alice@corp.example" {
		t.Fatalf("Email = %q, %v", e, err)
	}
	clk.add(command.DefaultEmailTTL - time.Second)
	if e, err := p.Email(ctx, "U0ALICE123"); err != nil || e != "alice@corp.example" || reads() != 1 {
		t.Errorf("within the TTL: %q, %v, %d users.info calls, want 1", e, err, reads())
	}
	clk.add(time.Second)
	if _, err := p.Email(ctx, "U0ALICE123"); err != nil || reads() != 2 {
		t.Errorf("after the TTL: %v, %d users.info calls, want 2", err, reads())
	}

	for _, tc := range []struct{ user, want string }{
		{"U0BOBBY123", "not confirmed"},
		{"U0CAROL123", "deactivated"},
		{"U0NOMAIL12", "users:read.email"},
		{"U0SPACE123", "cannot be part of a Kubernetes user name"},
		{slackrec.BotUserID, "is a bot"},
	} {
		if e, err := p.Email(ctx, tc.user); !errors.Is(err, command.ErrNoEmail) || !strings.Contains(err.Error(), tc.want) || e != "" {
			t.Errorf("%s: %q, %v; want ErrNoEmail saying %q", tc.user, e, err, tc.want)
		}
	}
	var se slack.SlackErrorResponse
	if _, err := p.Email(ctx, "U0NOBODY12"); !errors.As(err, &se) || se.Err != "user_not_found" || !strings.Contains(err.Error(), "users.info U0NOBODY12") {
		t.Errorf("unknown user: %v", err)
	}

	// The scopes as an app installed without the e-mail ones: the missing
	// one named; once granted, the next look-up succeeds (nothing kept).
	rec.SetScopes("chat:write", "commands", "usergroups:read")
	clk.add(command.DefaultEmailTTL)
	if _, err := p.Email(ctx, "U0ALICE123"); !errors.As(err, &se) || se.Err != "missing_scope" || !strings.Contains(err.Error(), "lacks the scope users:read ") {
		t.Errorf("without users:read: %v", err)
	}
	rec.SetScopes("chat:write", "commands", "usergroups:read", "users:read")
	if _, err := p.Email(ctx, "U0ALICE123"); !errors.Is(err, command.ErrNoEmail) || !strings.Contains(err.Error(), "users:read.email") {
		t.Errorf("without users:read.email: %v", err)
	}
	rec.SetScopes("chat:write", "commands", "usergroups:read", "users:read", "users:read.email")
	if e, err := p.Email(ctx, "U0ALICE123"); err != nil || e != "alice@corp.example" {
		t.Errorf("scopes granted: %q, %v", e, err)
	}
}

// countingUsers answers users.info for anyone, counting the calls per user.
type countingUsers struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingUsers) GetUserInfoContext(_ context.Context, user string, _ ...slack.GetUserInfoOption) (*slack.User, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[user]++
	return &slack.User{ID: user, IsEmailConfirmed: true, Profile: slack.UserProfile{Email: strings.ToLower(user) + "@corp.example"}}, nil
}

// The cache is bounded: past MaxCachedEmails people, the address read
// longest ago is read again, the newest is not.
func TestSlackProfilesBounded(t *testing.T) {
	users := &countingUsers{calls: map[string]int{}}
	clk := &clock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
	p := &command.SlackProfiles{Client: users, Now: clk.now}
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("U%09d", i) }
	for i := range command.MaxCachedEmails + 1 {
		if _, err := p.Email(ctx, id(i)); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Millisecond)
	}
	for _, i := range []int{command.MaxCachedEmails, 1, 0} {
		if _, err := p.Email(ctx, id(i)); err != nil {
			t.Fatal(err)
		}
	}
	if users.calls[id(0)] != 2 || users.calls[id(1)] != 1 || users.calls[id(command.MaxCachedEmails)] != 1 {
		t.Errorf("users.info calls: first %d (want 2: evicted), second %d, newest %d (want 1: kept)",
			users.calls[id(0)], users.calls[id(1)], users.calls[id(command.MaxCachedEmails)])
	}
}
