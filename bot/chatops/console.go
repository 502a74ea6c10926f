package chatops

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
)

// DefaultConsoleUser is the user id console commands run as.
const DefaultConsoleUser = "console"

// maxConsoleLine bounds a console line; longer ones are refused whole.
const maxConsoleLine = 64 << 10

// Console reads commands from In, one per line ("/hcp status" or
// "status"), runs them through Handler as a fixed local user and prints
// the replies to Out as plain text. Empty lines and lines starting with #
// are skipped; "quit" or "exit" ends the session. Usage errors are printed
// like in Slack, without calling Handler.
//
// Console requests have TransportConsole and no response_url: Handler
// answers synchronously with Run's ctx, however long it takes.
type Console struct {
	In      io.Reader
	Out     io.Writer
	Handler Handler
	// UserID is who the commands run as; DefaultConsoleUser if empty.
	UserID string
	// Prompt is printed before each line when set (interactive use).
	Prompt string
	// Users, when set, are the people sharing this console, by name, with
	// the user ID each one's commands run as. The line "as NAME" makes
	// NAME the one the following lines run as, and the prompt names them:
	// two people at one keyboard, so that four-eyes approval can be shown
	// (the demo). Lines run as UserID until the first "as".
	Users map[string]string

	// mu orders writes to Out: a late reply (Later) comes from another
	// goroutine.
	mu sync.Mutex
}

// Run serves the console until In ends (nil), ctx ends (ctx.Err()) or a
// write to Out fails. Reading from In is not interruptible: when ctx ends
// while waiting for a line, Run returns and the reading goroutine exits at
// the next line or EOF.
func (c *Console) Run(ctx context.Context) error {
	if c.In == nil || c.Out == nil || c.Handler == nil {
		return errors.New("chatops: console needs In, Out and Handler")
	}
	user := c.UserID
	if user == "" {
		user = DefaultConsoleUser
	}
	name := user
	for n, id := range c.Users {
		if id == user {
			name = n
		}
	}
	type line struct {
		text string
		err  error
	}
	lines := make(chan line)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(lines)
		r := bufio.NewReaderSize(c.In, 4096)
		for {
			text, err := readLine(r)
			if err == io.EOF && text == "" {
				return
			}
			select {
			case lines <- line{text, err}:
			case <-stop:
				return
			}
			if err == io.EOF {
				return
			}
		}
	}()
	for {
		if c.Prompt != "" {
			prompt := c.Prompt
			if len(c.Users) > 0 {
				prompt = "[" + name + "] " + prompt
			}
			c.mu.Lock()
			_, err := io.WriteString(c.Out, prompt)
			c.mu.Unlock()
			if err != nil {
				return fmt.Errorf("chatops: console: %w", err)
			}
		}
		var l line
		var open bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l, open = <-lines:
		}
		if !open {
			return nil
		}
		var out string
		switch {
		case errors.Is(l.err, errLineTooLong):
			out = fmt.Sprintf("line longer than %d bytes ignored", maxConsoleLine)
		case l.err != nil && l.err != io.EOF:
			return fmt.Errorf("chatops: console: %w", l.err)
		default:
			text := strings.TrimSpace(l.text)
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			if text == "quit" || text == "exit" {
				return nil
			}
			if as, ok := strings.CutPrefix(text, "as "); ok && len(c.Users) > 0 {
				as = strings.TrimSpace(as)
				if id, known := c.Users[as]; known {
					user, name = id, as
					out = "now acting as " + as + " (" + id + ")"
				} else {
					out = fmt.Sprintf("no user %q at this console; users: %s", as, strings.Join(slices.Sorted(maps.Keys(c.Users)), ", "))
				}
				break
			}
			out = c.run(ctx, user, name, text)
		}
		if out != "" {
			c.mu.Lock()
			_, err := io.WriteString(c.Out, out+"\n")
			c.mu.Unlock()
			if err != nil {
				return fmt.Errorf("chatops: console: %w", err)
			}
		}
	}
}

// run parses and runs one command line, returning the text to print.
func (c *Console) run(ctx context.Context, user, name, text string) (out string) {
	if rest, found := strings.CutPrefix(text, Prefix); found && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
		text = rest
	}
	cmd, err := Parse(text)
	if err != nil {
		var ue *UsageError
		if errors.As(err, &ue) {
			return ue.Hint + "\nusage: " + ue.Usage
		}
		return err.Error()
	}
	if h, isHelp := cmd.(ShowHelp); isHelp {
		return PlainText(helpReply(h), c.Users)
	}
	req := Request{Origin: Origin{Transport: TransportConsole, UserID: user, UserName: name}, Command: cmd}
	defer func() {
		if p := recover(); p != nil {
			out = fmt.Sprintf("internal error: %v", p)
		}
	}()
	ctx = WithLater(ctx, func(r Reply) {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, _ = io.WriteString(c.Out, PlainText(r, c.Users)+"\n")
	})
	return PlainText(c.Handler.HandleCommand(ctx, req), c.Users)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its end, refusing (and skipping) lines
// over maxConsoleLine instead of buffering them whole.
func readLine(r *bufio.Reader) (string, error) {
	var b strings.Builder
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if b.Len()+len(chunk) > maxConsoleLine+1 {
				tooLong = true
				b.Reset()
			} else {
				b.Write(chunk)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return "", errLineTooLong
		}
		return strings.TrimRight(b.String(), "\r\n"), err
	}
}
