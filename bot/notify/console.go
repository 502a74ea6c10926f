package notify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// Console is the Notifier of the demo and of setups without Slack: it
// writes each root rendering and each reply as readable text to an
// io.Writer. Like the Slack notifier it skips versions no newer than the
// one printed and replies whose ID was printed, but it prints every
// rendering rather than coalescing, as a log of what Slack would show.
// It remembers every Key and reply ID it printed, which suits a demo, not
// a bot running for months.
type Console struct {
	w    io.Writer
	wake chan struct{}
	// style spells Block Kit for the terminal (SetStyle); zero: PlainText.
	style TextStyle

	mu      sync.Mutex
	queue   []any // Message or Reply
	printed map[string]uint64
	posted  map[string]time.Time // when each Key was first printed
	replies map[string]struct{}  // key + "\x00" + reply id
	running bool
	stopped bool
}

var _ Notifier = (*Console)(nil)

// NewConsole returns a Console writing to w.
func NewConsole(w io.Writer) *Console {
	return &Console{w: w, wake: make(chan struct{}, 1),
		printed: map[string]uint64{}, replies: map[string]struct{}{}}
}

// SetStyle sets how the console spells Block Kit, e.g. chatops'
// ConsoleStyle: mrkdwn escapes undone, buttons as the commands they run.
// Call it before Run.
func (c *Console) SetStyle(s TextStyle) { c.style = s }

// Upsert implements Notifier.
func (c *Console) Upsert(_ context.Context, m Message) error {
	if err := m.validate(); err != nil {
		return err
	}
	return c.enqueue(m)
}

// Reply implements Notifier.
func (c *Console) Reply(_ context.Context, r Reply) error {
	if err := r.validate(); err != nil {
		return err
	}
	return c.enqueue(r)
}

func (c *Console) enqueue(item any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	c.queue = append(c.queue, item)
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// Run implements Notifier: it writes queued items until ctx is done, then
// writes what is still queued and returns.
func (c *Console) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running || c.stopped {
		c.mu.Unlock()
		return errors.New("notify: Run called more than once")
	}
	c.running = true
	c.mu.Unlock()
	for {
		select {
		case <-c.wake:
			if err := c.flush(); err != nil {
				return err
			}
		case <-ctx.Done():
			c.mu.Lock()
			c.stopped = true
			c.mu.Unlock()
			return c.flush()
		}
	}
}

func (c *Console) flush() error {
	c.mu.Lock()
	items := c.queue
	c.queue = nil
	c.mu.Unlock()
	for _, it := range items {
		var s string
		switch v := it.(type) {
		case Message:
			s = c.renderMessage(v)
		case Reply:
			s = c.renderReply(v)
		}
		if s == "" {
			continue
		}
		if _, err := io.WriteString(c.w, s); err != nil {
			return fmt.Errorf("notify: console: %w", err)
		}
	}
	return nil
}

// renderMessage renders a root as
//
//	● NEW inc-1 in C0INC (v1)
//	  <blocks as plain text, or the text>
func (c *Console) renderMessage(m Message) string {
	last, seen := c.printed[m.Key]
	if seen && m.Version <= last {
		return ""
	}
	c.printed[m.Key] = m.Version
	if !seen {
		if c.posted == nil {
			c.posted = map[string]time.Time{}
		}
		c.posted[m.Key] = time.Now()
	}
	verb := "NEW"
	if seen {
		verb = "UPDATE"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "● %s %s in %s (v%d)\n", verb, m.Key, m.Channel, m.Version)
	writeIndented(&b, c.body(m.Text, m.Blocks), "  ")
	return b.String()
}

// renderReply renders a thread reply indented under its root: a line
// "  ↳ inc-1 reply", then the body indented by four spaces.
func (c *Console) renderReply(r Reply) string {
	if r.ID != "" {
		id := r.Key + "\x00" + r.ID
		if _, dup := c.replies[id]; dup {
			return ""
		}
		c.replies[id] = struct{}{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  ↳ %s reply\n", r.Key)
	writeIndented(&b, c.body(r.Text, r.Blocks), "    ")
	return b.String()
}

// body prefers the blocks, which carry the fields; the text is Slack's
// notification fallback and often a summary of them.
func (c *Console) body(text string, blocks []slack.Block) string {
	if s := c.style.PlainText(blocks); s != "" {
		return s
	}
	if c.style.Inline != nil {
		return c.style.Inline(text)
	}
	return text
}

func writeIndented(b *strings.Builder, s, indent string) {
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(indent + line + "\n")
	}
}

var (
	_ RootChecker = (*Console)(nil)
	_ PostTimes   = (*Console)(nil)
)

// FirstPosted implements PostTimes: when this process first printed Key.
func (c *Console) FirstPosted(_ context.Context, key string) (time.Time, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.posted[key]
	return at, ok, nil
}

// HasRoot implements RootChecker: a Key counts once queued.
func (c *Console) HasRoot(_ context.Context, key string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.printed[key]; ok {
		return true, nil
	}
	for _, it := range c.queue {
		if m, ok := it.(Message); ok && m.Key == key {
			return true, nil
		}
	}
	return false, nil
}
