package notify

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/slack-go/slack"
)

// Slack has no idempotency key, so a post whose answer was lost (the
// instance died, or the call timed out after Slack accepted it) leaves a
// claim without ts in the store. Every post carries Slack message
// metadata naming its Key (and reply ID), and whoever takes such a claim
// over first looks for the post in the channel's history (roots) or the
// root's thread (replies): found, its ts is recorded and nothing is
// posted again. This needs the channels:history / groups:history scopes;
// without them the lookup fails and the post is retried later.

// metadataEvent is the event_type of the metadata on hcpbot's posts.
const metadataEvent = "hcpbot_notification"

// lookupPages bounds the history read by one lookup (200 messages each).
const lookupPages = 5

func metadata(key, reply string) slack.MsgOption {
	p := map[string]any{"key": key}
	if reply != "" {
		p["reply"] = reply
	}
	return slack.MsgOptionMetadata(slack.SlackMetadata{EventType: metadataEvent, EventPayload: p})
}

func carries(m slack.Message, key, reply string) bool {
	md := m.Metadata
	if md.EventType != metadataEvent || md.EventPayload["key"] != key {
		return false
	}
	got, _ := md.EventPayload["reply"].(string)
	return got == reply
}

// slackTS is t as a Slack timestamp ("seconds.micros").
func slackTS(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10) + fmt.Sprintf(".%06d", t.Nanosecond()/1000)
}

// findRoot returns the ts of key's root if one was posted to channel since
// the claim was made (with a minute of clock skew to spare), "" if not.
func (q *chanQueue) findRoot(ctx context.Context, channel, key string, claimed time.Time) (string, error) {
	params := &slack.GetConversationHistoryParameters{
		ChannelID: channel, Oldest: slackTS(claimed.Add(-time.Minute)), Limit: 200, IncludeAllMetadata: true,
	}
	for range lookupPages {
		var resp *slack.GetConversationHistoryResponse
		_, _, err := q.call(ctx, methodHistory, func(ctx context.Context) (string, error) {
			var err error
			resp, err = q.s.cfg.Client.GetConversationHistoryContext(ctx, params)
			return "", err
		})
		if err != nil {
			return "", fmt.Errorf("look for the root of %q: %w", key, err)
		}
		for _, m := range resp.Messages {
			if carries(m, key, "") && (m.ThreadTimestamp == "" || m.ThreadTimestamp == m.Timestamp) {
				return m.Timestamp, nil
			}
		}
		if !resp.HasMore || resp.ResponseMetaData.NextCursor == "" {
			return "", nil
		}
		params.Cursor = resp.ResponseMetaData.NextCursor
	}
	return "", nil
}

// findReply returns the ts of reply id in the thread of rootTS, "" if it
// is not there.
func (q *chanQueue) findReply(ctx context.Context, channel, rootTS, key, id string) (string, error) {
	params := &slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: rootTS, Limit: 200, IncludeAllMetadata: true}
	for range lookupPages {
		var msgs []slack.Message
		var more bool
		var cursor string
		_, _, err := q.call(ctx, methodReplies, func(ctx context.Context) (string, error) {
			var err error
			msgs, more, cursor, err = q.s.cfg.Client.GetConversationRepliesContext(ctx, params)
			return "", err
		})
		if err != nil {
			return "", fmt.Errorf("look for reply %q of %q: %w", id, key, err)
		}
		for _, m := range msgs {
			if carries(m, key, id) {
				return m.Timestamp, nil
			}
		}
		if !more || cursor == "" {
			return "", nil
		}
		params.Cursor = cursor
	}
	return "", nil
}
