package slackrec

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/bot/blockkit"
)

// Slack's answers beyond the happy path: messages over Block Kit's limits,
// channels the bot cannot post to, a revoked token, scopes not granted,
// and the look-ups (users.info, usergroups.users.list) the bot makes.

// BlockViolation is a message the recorder refused for breaking one of Block
// Kit's limits (package blockkit), as Slack refuses it.
type BlockViolation struct {
	Method  string // chat.postMessage, chat.update, chat.postEphemeral or MethodResponseURL
	Channel string
	Code    string // invalid_blocks, msg_too_long or msg_blocks_too_long, what Slack answered
	Detail  string // which limits, where
}

func (v BlockViolation) String() string {
	return fmt.Sprintf("%s %s: %s", v.Method, v.Channel, v.Detail)
}

// BlockViolations returns the messages refused for breaking Block Kit's
// limits. Unless ExpectInvalid was called, any of them fails the test when
// it ends: no test of a correct bot sends one. Reset keeps them.
func (r *Recorder) BlockViolations() []BlockViolation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]BlockViolation(nil), r.blockViolations...)
}

// ExpectInvalid says the test sends messages over Block Kit's limits on
// purpose: they are still refused and counted, but do not fail it.
func (r *Recorder) ExpectInvalid() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expectInvalid = true
}

// checkLimits fails the test at cleanup for each block violation not
// expected.
func (r *Recorder) checkLimits(tb interface{ Errorf(string, ...any) }) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expectInvalid {
		return
	}
	for _, v := range r.blockViolations {
		tb.Errorf("slackrec: Slack would refuse this message (%s): %s", v.Code, v)
	}
}

// validate checks a message's text and blocks as Slack does; r.mu is held.
// A refusal is recorded as a BlockViolation.
func (r *Recorder) validate(c *Call, text string, blocks []byte) (reply, bool) {
	err := blockkit.ValidateMessage(text, blocks)
	if err == nil {
		n := utf8.RuneCountInString(text) + utf8.RuneCount(blocks)
		if r.opts.sizeLimit <= 0 || n <= r.opts.sizeLimit {
			return reply{}, true
		}
		code := "msg_too_long"
		if len(blocks) > 0 && string(blocks) != "[]" && string(blocks) != "null" {
			code = "msg_blocks_too_long"
		}
		r.blockViolations = append(r.blockViolations, BlockViolation{Method: c.Method, Channel: c.Channel, Code: code,
			Detail: fmt.Sprintf("%d characters of text and blocks, over the total size limit of %d", n, r.opts.sizeLimit)})
		return fail(http.StatusOK, code), false
	}
	code, detail := blockkit.ErrInvalidBlocks, err.Error()
	var be *blockkit.Error
	if errors.As(err, &be) {
		code = be.Code
	}
	r.blockViolations = append(r.blockViolations, BlockViolation{Method: c.Method, Channel: c.Channel, Code: code, Detail: detail})
	return fail(http.StatusOK, code), false
}

// ChannelState is how Slack sees a channel from the bot's side.
type ChannelState int

const (
	// ChannelOK is every channel's state until SetChannel changes it.
	ChannelOK ChannelState = iota
	// ChannelNotFound: deleted, or private and never shared with the bot.
	ChannelNotFound
	// ChannelNotMember: the bot is not (or no longer) in the channel.
	ChannelNotMember
	// ChannelArchived: the channel is archived; it can still be read.
	ChannelArchived
)

// SetChannel makes the recorder answer calls on channel as Slack does in
// state s: channel_not_found on every channel method; not_in_channel on
// posting, updating and reading; is_archived on posting and updating
// (reading an archived channel works). Posts to a response_url are not
// affected: Slack accepts them from an app outside the channel.
func (r *Recorder) SetChannel(channel string, s ChannelState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s == ChannelOK {
		delete(r.channels, channel)
		return
	}
	r.channels[channel] = s
}

// RevokeToken makes every call with token ("" means any token) answer
// token_revoked, as after the app was uninstalled or its token rotated.
// Posts to a response_url need no token and still work.
func (r *Recorder) RevokeToken(token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revoked[token] = true
}

// writes are the methods that change a channel; reads the ones that read it.
var (
	writes = map[string]bool{"chat.postMessage": true, "chat.postEphemeral": true, "chat.update": true}
	reads  = map[string]bool{"conversations.history": true, "conversations.replies": true, "conversations.info": true}
)

// refuse returns Slack's answer to c if its token or channel forbids it;
// r.mu is held.
func (r *Recorder) refuse(c *Call) (reply, bool) {
	if c.Method == MethodResponseURL {
		return reply{}, false
	}
	if r.revoked[""] || (c.token != "" && r.revoked[c.token]) {
		return fail(http.StatusOK, "token_revoked"), true
	}
	code := ""
	switch r.channels[c.Channel] {
	case ChannelNotFound:
		if writes[c.Method] || reads[c.Method] {
			code = "channel_not_found"
		}
	case ChannelNotMember:
		if writes[c.Method] || reads[c.Method] {
			code = "not_in_channel"
		}
	case ChannelArchived:
		if writes[c.Method] {
			code = "is_archived"
		}
	}
	if code == "" {
		return reply{}, false
	}
	return fail(http.StatusOK, code), true
}

// tokenOf is the token a call carries, in its Authorization header or,
// as Slack also accepts, its "token" field.
func tokenOf(req *http.Request, form map[string][]string) string {
	if t, found := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); found {
		return t
	}
	if v := form["token"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// User is a workspace member, as users.info reports it.
type User struct {
	ID       string
	Name     string // the handle
	RealName string
	Bot      bool
	Deleted  bool
	// Email is the profile's e-mail address; users.info shows it only to
	// a token with the scope users:read.email (SetScopes).
	Email string
	// EmailUnconfirmed: the address was changed and the confirmation
	// mail Slack sent to it not yet followed (is_email_confirmed false).
	EmailUnconfirmed bool
}

// SetScopes sets the OAuth scopes the bot token was granted, as the app
// was installed with them; until it is called every scope is granted.
// The look-ups then answer as Slack does: missing_scope (with the scope
// needed and the scopes provided) for users.info without users:read and
// for usergroups.users.list without usergroups:read, and users.info's
// profile without its e-mail without users:read.email. (Posting is not
// checked: a bot without chat:write is no bot.)
func (r *Recorder) SetScopes(scopes ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scopes = append([]string{}, scopes...)
}

// granted reports whether the token has scope; r.mu is held.
func (r *Recorder) granted(scope string) bool {
	return r.scopes == nil || slices.Contains(r.scopes, scope)
}

// missingScope is Slack's answer to a method the token lacks needed for:
// the error and, beside it, the scope needed and the scopes provided.
func (r *Recorder) missingScope(needed string) reply {
	rep := fail(http.StatusOK, "missing_scope")
	body := rep.body.(map[string]any)
	body["needed"], body["provided"] = needed, strings.Join(r.scopes, ",")
	return rep
}

// AddUser adds or replaces a member users.info knows.
func (r *Recorder) AddUser(u User) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.users[u.ID] = u
}

// SetUserGroup sets the members of a user group (an id such as S0…), as
// usergroups.users.list answers them.
func (r *Recorder) SetUserGroup(id string, members ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups[id] = append([]string{}, members...)
}

// userInfo serves users.info; the bot itself is always known.
func (r *Recorder) userInfo(c *Call) reply {
	if !r.granted("users:read") {
		return r.missingScope("users:read")
	}
	id := c.Form.Get("user")
	u, found := r.users[id]
	if id == BotUserID {
		u, found = User{ID: BotUserID, Name: "hcpbot", RealName: "hcpbot", Bot: true}, true
	}
	if !found {
		return fail(http.StatusOK, "user_not_found")
	}
	profile := map[string]any{"real_name": u.RealName, "display_name": u.Name}
	if u.Email != "" && r.granted("users:read.email") {
		profile["email"] = u.Email
	}
	user := map[string]any{
		"id": u.ID, "team_id": TeamID, "name": u.Name, "real_name": u.RealName,
		"deleted": u.Deleted, "is_bot": u.Bot, "tz": "UTC", "profile": profile,
	}
	if !u.Bot {
		user["is_email_confirmed"] = !u.EmailUnconfirmed
	}
	return ok(map[string]any{"user": user})
}

// groupMembers serves usergroups.users.list.
func (r *Recorder) groupMembers(c *Call) reply {
	if !r.granted("usergroups:read") {
		return r.missingScope("usergroups:read")
	}
	members, found := r.groups[c.Form.Get("usergroup")]
	if !found {
		return fail(http.StatusOK, "no_such_subteam")
	}
	return ok(map[string]any{"users": append([]string{}, members...)})
}

// responseBody reads the text and blocks of a post to a response_url,
// which is JSON.
func responseBody(c *Call) (string, []byte) {
	text, _ := c.JSON["text"].(string)
	var blocks []byte
	if b, found := c.JSON["blocks"]; found && b != nil {
		blocks, _ = json.Marshal(b)
	}
	return text, blocks
}
