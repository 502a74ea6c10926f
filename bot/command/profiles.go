package command

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/slack-go/slack"
)

// Emails looks up a Slack user's e-mail address: an identities.map entry
// with emailPrefix makes the person's Kubernetes user name of it.
// SlackProfiles implements it.
type Emails interface {
	Email(ctx context.Context, userID string) (string, error)
}

// ErrNoEmail: the Slack profile holds no e-mail address that may stand
// for the person (none shown, not confirmed, a bot, deactivated).
var ErrNoEmail = errors.New("no usable e-mail address in the Slack profile")

// UserInfoGetter is the part of *slack.Client SlackProfiles uses.
type UserInfoGetter interface {
	GetUserInfoContext(ctx context.Context, user string, options ...slack.GetUserInfoOption) (*slack.User, error)
}

// Defaults of SlackProfiles.
const (
	// DefaultEmailTTL is how long an e-mail read from Slack is used before
	// it is read again: a changed address (an admin's edit, a person
	// leaving) takes effect within it, and a burst of approvals and
	// `/hcp whoami` costs one users.info per person (Tier 4, ~100/min).
	DefaultEmailTTL = 5 * time.Minute
	// MaxCachedEmails bounds the cache: beyond it the entry read longest
	// ago goes first.
	MaxCachedEmails = 1000
)

// SlackProfiles reads e-mails with Slack's users.info (the app needs the
// scopes users:read and users:read.email), each kept for TTL. Only
// addresses are kept, never failures: a scope granted or a profile fixed
// applies at the next look-up. The zero value with Client set is ready; it
// is safe for concurrent use.
type SlackProfiles struct {
	Client UserInfoGetter
	// TTL is how long an address is used; 0 means DefaultEmailTTL.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	cache map[string]cachedEmail
}

type cachedEmail struct {
	email string
	read  time.Time
}

var _ Emails = (*SlackProfiles)(nil)

// Email implements Emails.
func (p *SlackProfiles) Email(ctx context.Context, userID string) (string, error) {
	now := p.now()
	if e, ok := p.cached(userID, now); ok {
		return e, nil
	}
	u, err := p.Client.GetUserInfoContext(ctx, userID)
	if err != nil {
		var se slack.SlackErrorResponse
		if errors.As(err, &se) && se.Err == "missing_scope" {
			return "", fmt.Errorf("slack users.info %s: the app lacks the scope %s (configs/slack/manifest.yaml): %w", userID, se.Needed, err)
		}
		return "", fmt.Errorf("slack users.info %s: %w", userID, err)
	}
	email := u.Profile.Email
	switch {
	case u.Deleted:
		return "", fmt.Errorf("%w: %s is deactivated", ErrNoEmail, userID)
	case u.IsBot:
		return "", fmt.Errorf("%w: %s is a bot", ErrNoEmail, userID)
	case email == "":
		return "", fmt.Errorf("%w: users.info shows %s without one (the app needs the scope users:read.email)", ErrNoEmail, userID)
	case !u.IsEmailConfirmed:
		// Until its owner follows Slack's confirmation mail, an address
		// is only what someone typed.
		return "", fmt.Errorf("%w: the address of %s is not confirmed yet", ErrNoEmail, userID)
	case !plausibleEmail(email):
		return "", fmt.Errorf("%w: the address of %s cannot be part of a Kubernetes user name", ErrNoEmail, userID)
	}
	p.keep(userID, email, now)
	return email, nil
}

// plausibleEmail accepts what can be a user name's part: one @ between two
// non-empty parts, no white space or control characters (the name travels
// in an Impersonate-User header), not absurdly long.
func plausibleEmail(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && domain != "" && !strings.Contains(domain, "@") && len(s) <= 254 &&
		!strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
}

func (p *SlackProfiles) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *SlackProfiles) ttl() time.Duration {
	if p.TTL > 0 {
		return p.TTL
	}
	return DefaultEmailTTL
}

func (p *SlackProfiles) cached(userID string, now time.Time) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.cache[userID]
	if !ok || now.Sub(e.read) >= p.ttl() || now.Before(e.read) {
		return "", false
	}
	return e.email, true
}

func (p *SlackProfiles) keep(userID, email string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cache == nil {
		p.cache = map[string]cachedEmail{}
	}
	if _, ok := p.cache[userID]; !ok && len(p.cache) >= MaxCachedEmails {
		p.evict(now)
	}
	p.cache[userID] = cachedEmail{email, now}
}

// evict drops the expired addresses, or when none has expired the one read
// longest ago; p.mu is held.
func (p *SlackProfiles) evict(now time.Time) {
	oldest, first := "", time.Time{}
	for id, e := range p.cache {
		if now.Sub(e.read) >= p.ttl() {
			delete(p.cache, id)
			continue
		}
		if oldest == "" || e.read.Before(first) {
			oldest, first = id, e.read
		}
	}
	if len(p.cache) >= MaxCachedEmails {
		delete(p.cache, oldest)
	}
}
