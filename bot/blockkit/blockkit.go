// Package blockkit is the vocabulary of the bot's Slack messages, one
// leaf package that the correlator (bot), the chat layer (bot/chatops and
// bot/command), the digest and the notifier (bot/notify) all speak, so
// that none of them imports another for a word:
//
//   - Slack's documented Block Kit and message limits (this file) and
//     Validate, which checks a message against them (the Slack recorder
//     in tests, golden tests of every message kind);
//   - keeping within them: Truncate and SplitText (text.go), ClampBlocks
//     (clamp.go);
//   - mrkdwn: EscapeText, EscapeCode, Mention, and the text objects and
//     blocks built from it, within their limits: Mrkdwn, Plain, Field,
//     Sections (mrkdwn.go);
//   - the button action ids the bot puts on its messages and accepts back
//     (actions.go).
//
// Validate works on the JSON Slack receives, so it sees exactly what a
// chat.postMessage, chat.update, chat.postEphemeral or response_url post
// carries, whatever built it. It checks the limits of Slack's Block Kit
// reference (https://api.slack.com/reference/block-kit): the number of
// blocks, the length of texts, ids and values, the number of fields and
// elements, the text object type where Slack requires plain_text, and the
// uniqueness of block_id and action_id within a message. Slack answers a
// message that breaks one with invalid_blocks; a message text longer than
// MaxMessageText is answered msg_too_long.
//
// Lengths are counted in characters (runes), as Truncate cuts them.
package blockkit

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

// The limits, in characters or items.
const (
	MaxBlocks          = 50    // blocks per message
	MaxSectionText     = 3000  // a section's text
	MaxSectionFields   = 10    // fields per section
	MaxFieldText       = 2000  // one section field
	MaxHeaderText      = 150   // a header's plain_text
	MaxContextElements = 10    // elements of a context block
	MaxContextText     = 3000  // a text element of a context block (any text object)
	MaxActionsElements = 25    // elements of an actions block
	MaxButtonText      = 75    // a button's plain_text
	MaxButtonValue     = 2000  // a button's value
	MaxURL             = 3000  // a button's url, an image's image_url
	MaxID              = 255   // block_id, action_id
	MaxAltText         = 2000  // an image's alt_text
	MaxImageTitle      = 2000  // an image block's title
	MaxConfirmTitle    = 100   // a confirm dialog's title
	MaxConfirmText     = 300   // a confirm dialog's text
	MaxConfirmButton   = 30    // a confirm dialog's confirm and deny
	MaxMessageText     = 40000 // a message's text; longer is msg_too_long
)

// Slack's error codes for a message over the limits.
const (
	ErrInvalidBlocks = "invalid_blocks"
	ErrMsgTooLong    = "msg_too_long"
)

// Violation is one broken limit.
type Violation struct {
	Path string // e.g. "blocks[3].text.text"
	What string // e.g. "3012 characters, limit 3000"
}

func (v Violation) String() string { return v.Path + ": " + v.What }

// Error lists the violations of one message; Code is the error Slack
// answers.
type Error struct {
	Code       string
	Violations []Violation
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Code)
	for i, v := range e.Violations {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(v.String())
	}
	return b.String()
}

// ValidateBlocks checks blocks as slack-go sends them. What ClampBlocks
// returns passes, unless it breaks a limit clamping cannot repair (a
// duplicate block_id, an empty text, a mrkdwn header, ...).
func ValidateBlocks(blocks []slack.Block) error {
	if len(blocks) == 0 {
		return nil
	}
	raw, err := json.Marshal(blocks)
	if err != nil {
		return &Error{Code: ErrInvalidBlocks, Violations: []Violation{{"blocks", "does not encode: " + err.Error()}}}
	}
	return Validate(raw)
}

// ValidateMessage checks a message's text and its blocks (a JSON array;
// empty means none), as Slack does before accepting it.
func ValidateMessage(text string, blocks []byte) error {
	if n := utf8.RuneCountInString(text); n > MaxMessageText {
		return &Error{Code: ErrMsgTooLong, Violations: []Violation{{"text", over(n, MaxMessageText)}}}
	}
	if len(blocks) == 0 {
		return nil
	}
	return Validate(blocks)
}

// Validate checks a blocks JSON array against the limits; nil means Slack
// would accept it.
func Validate(blocks []byte) error {
	var arr []any
	if err := json.Unmarshal(blocks, &arr); err != nil {
		return &Error{Code: ErrInvalidBlocks, Violations: []Violation{{"blocks", "not a JSON array: " + err.Error()}}}
	}
	c := checker{blockIDs: map[string]bool{}, actionIDs: map[string]bool{}}
	if len(arr) > MaxBlocks {
		c.add("blocks", "%d blocks, limit %d", len(arr), MaxBlocks)
	}
	for i, b := range arr {
		c.block(fmt.Sprintf("blocks[%d]", i), b)
	}
	if len(c.v) == 0 {
		return nil
	}
	return &Error{Code: ErrInvalidBlocks, Violations: c.v}
}

type checker struct {
	v         []Violation
	blockIDs  map[string]bool
	actionIDs map[string]bool
}

func (c *checker) add(path, format string, args ...any) {
	c.v = append(c.v, Violation{path, fmt.Sprintf(format, args...)})
}

func over(n, limit int) string { return fmt.Sprintf("%d characters, limit %d", n, limit) }

// str checks an optional string field of o against limit; it returns the
// value and whether it is there.
func (c *checker) str(o map[string]any, path, key string, limit int) (string, bool) {
	v, found := o[key]
	if !found || v == nil {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		c.add(path+"."+key, "not a string")
		return "", false
	}
	if n := utf8.RuneCountInString(s); limit > 0 && n > limit {
		c.add(path+"."+key, "%s", over(n, limit))
	}
	return s, true
}

// id checks a block_id or action_id: its length and that it is unique in
// the message.
func (c *checker) id(o map[string]any, path, key string, seen map[string]bool) {
	s, found := c.str(o, path, key, MaxID)
	if !found {
		return
	}
	if s == "" {
		c.add(path+"."+key, "empty")
		return
	}
	if seen[s] {
		c.add(path+"."+key, "%q is not unique in the message", s)
	}
	seen[s] = true
}

// object returns v as a JSON object, or notes that it is not one.
func (c *checker) object(path string, v any) (map[string]any, bool) {
	o, isObj := v.(map[string]any)
	if !isObj {
		c.add(path, "not an object")
	}
	return o, isObj
}

func (c *checker) block(path string, v any) {
	b, isObj := c.object(path, v)
	if !isObj {
		return
	}
	c.id(b, path, "block_id", c.blockIDs)
	typ, _ := b["type"].(string)
	switch typ {
	case "section":
		_, hasText := b["text"]
		fields, hasFields := b["fields"]
		if !hasText && !hasFields {
			c.add(path, "section without text or fields")
		}
		if hasText {
			c.text(path+".text", b["text"], MaxSectionText, false)
		}
		if hasFields {
			fs, isArr := fields.([]any)
			switch {
			case !isArr:
				c.add(path+".fields", "not an array")
			case len(fs) > MaxSectionFields:
				c.add(path+".fields", "%d fields, limit %d", len(fs), MaxSectionFields)
			}
			for i, f := range fs {
				c.text(fmt.Sprintf("%s.fields[%d]", path, i), f, MaxFieldText, false)
			}
		}
		if acc, found := b["accessory"]; found {
			c.element(path+".accessory", acc)
		}
	case "header":
		c.text(path+".text", b["text"], MaxHeaderText, true)
	case "context":
		els := c.elements(path, b, MaxContextElements)
		for i, e := range els {
			p := fmt.Sprintf("%s.elements[%d]", path, i)
			if o, isObj := e.(map[string]any); isObj && o["type"] == "image" {
				c.image(p, o)
				continue
			}
			c.text(p, e, MaxContextText, false)
		}
	case "actions":
		for i, e := range c.elements(path, b, MaxActionsElements) {
			c.element(fmt.Sprintf("%s.elements[%d]", path, i), e)
		}
	case "image":
		c.image(path, b)
		if t, found := b["title"]; found {
			c.text(path+".title", t, MaxImageTitle, true)
		}
	case "divider", "rich_text", "input", "file", "video", "markdown", "table":
		// No limit hcpbot's messages could reach.
	case "":
		c.add(path+".type", "missing")
	default:
		c.add(path+".type", "unknown block type %q", typ)
	}
}

// elements returns a block's elements, checking there are 1 to limit.
func (c *checker) elements(path string, b map[string]any, limit int) []any {
	els, isArr := b["elements"].([]any)
	switch {
	case !isArr:
		c.add(path+".elements", "missing or not an array")
	case len(els) == 0:
		c.add(path+".elements", "empty")
	case len(els) > limit:
		c.add(path+".elements", "%d elements, limit %d", len(els), limit)
	}
	return els
}

// text checks a text object: its type, that it is not empty, and its length.
func (c *checker) text(path string, v any, limit int, plainOnly bool) {
	o, isObj := v.(map[string]any)
	if !isObj {
		c.add(path, "not a text object")
		return
	}
	typ, _ := o["type"].(string)
	switch {
	case typ == "plain_text":
	case typ == "mrkdwn" && plainOnly:
		c.add(path+".type", "mrkdwn where Slack requires plain_text")
	case typ == "mrkdwn":
		if _, found := o["emoji"]; found {
			c.add(path+".emoji", "emoji is only allowed on plain_text")
		}
	default:
		c.add(path+".type", "text object type %q, want plain_text or mrkdwn", typ)
	}
	s, found := c.str(o, path, "text", limit)
	if !found || s == "" {
		c.add(path+".text", "empty")
	}
}

func (c *checker) image(path string, o map[string]any) {
	if s, _ := c.str(o, path, "image_url", MaxURL); s == "" {
		if _, file := o["slack_file"]; !file {
			c.add(path+".image_url", "missing")
		}
	}
	if _, found := c.str(o, path, "alt_text", MaxAltText); !found {
		c.add(path+".alt_text", "missing")
	}
}

// element checks an interactive element; buttons in full, others by their
// action_id.
func (c *checker) element(path string, v any) {
	o, isObj := c.object(path, v)
	if !isObj {
		return
	}
	c.id(o, path, "action_id", c.actionIDs)
	switch o["type"] {
	case "button":
		c.text(path+".text", o["text"], MaxButtonText, true)
		c.str(o, path, "value", MaxButtonValue)
		c.str(o, path, "url", MaxURL)
		if s, found := c.str(o, path, "style", 0); found && s != "primary" && s != "danger" {
			c.add(path+".style", "%q, want primary or danger", s)
		}
	case "image":
		c.image(path, o)
	}
	if conf, found := o["confirm"]; found {
		c.confirm(path+".confirm", conf)
	}
}

func (c *checker) confirm(path string, v any) {
	o, isObj := c.object(path, v)
	if !isObj {
		return
	}
	c.text(path+".title", o["title"], MaxConfirmTitle, true)
	c.text(path+".text", o["text"], MaxConfirmText, false)
	c.text(path+".confirm", o["confirm"], MaxConfirmButton, true)
	c.text(path+".deny", o["deny"], MaxConfirmButton, true)
}
