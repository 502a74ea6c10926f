package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/demo"
	"github.com/hcpbot/hcpbot/internal/logging"
	"github.com/hcpbot/hcpbot/watchers"
)

func init() {
	extraCommands = append(extraCommands, command{name: "demo", summary: "run agent + bot on a local control plane and play the seed 000 incident", run: runDemo})
}

const demoSource = "local"

func runDemo(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("demo", "[--script] [--dir DIR]")
	script := fs.Bool("script", false, "play the scenario end to end without a terminal; exit 0 only if diagnosed, fixed and resolved")
	dir := fs.String("dir", "", "working folder (default: a new temporary folder)")
	timeout := fs.Duration("timeout", 3*time.Minute, "with --script: how long each step may take")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "hcpbot-demo-")
		if err != nil {
			return err
		}
		*dir = d
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(*dir, "hcpbot.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	log, _ := logging.New(logFile, "info", "json")
	c.klog(log)
	// The console notifier, the script and the console prompt all print.
	out := &lockedWriter{w: c.stdout}

	w, err := demo.Start(ctx, *dir, out, os.Stderr)
	if err != nil {
		return err
	}
	defer w.Stop()

	conn, err := bus.Connect(ctx, bus.Config{Name: "hcpbot-demo", Embedded: bus.EmbeddedConfig{StoreDir: filepath.Join(*dir, "nats"), Name: "hcpbot-demo", Logger: log}}, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(1, 0, 0)); err != nil {
		return err
	}

	var notifier notify.Notifier
	channel := "console"
	if token, ch := c.getenv("SLACK_BOT_TOKEN"), c.getenv("HCPBOT_SLACK_CHANNEL"); token != "" && ch != "" {
		store, err := notify.NewKVStore(ctx, conn.JS, notify.KVConfig{})
		if err != nil {
			return err
		}
		notifier, err = notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient(token, c.getenv("SLACK_API_URL"), nil), Store: store, Log: log})
		if err != nil {
			return err
		}
		channel = ch
		fmt.Fprintf(out, "▶ posting to Slack channel %s\n", ch)
	} else {
		notifier = notify.NewConsole(out)
	}

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	metrics := watchers.NewMetrics(nil)
	pub := watchers.NewJetStreamPublisher(conn.JS, 10000, metrics, log)
	agent, err := watchers.New(watchers.Config{Source: demoSource, Identity: "demo", ProbeInterval: 2 * time.Second}, w.Kube, w.Dynamic, pub, metrics, log)
	if err != nil {
		return err
	}
	pub.OnResync(agent.Resync)
	// Short waits: the demo shows the whole life of an incident in a minute.
	b := bot.New(bot.Config{Channel: channel, GroupWait: 2 * time.Second, GroupInterval: 5 * time.Second}, conn.JS, notifier, nil, log)
	wg.Go(func() { pub.Run(runCtx) })
	wg.Go(func() { _ = agent.Run(runCtx) })
	wg.Go(func() { _ = notifier.Run(runCtx) })
	wg.Go(func() {
		if err := b.Run(runCtx); err != nil {
			log.Error().Err(err).Msg("bot stopped")
		}
	})

	fmt.Fprintf(out, "▶ agent + bot running on embedded NATS; logs in %s\n", logFile.Name())
	fmt.Fprintf(out, "▶ look with kubectl:  export KUBECONFIG=%s\n", w.Kubeconfig)
	if err := w.BreakProxied(ctx, out); err != nil {
		return err
	}
	h := &demoHandler{w: w, bot: b, out: out, log: log, proposals: map[string]*diagnose.Fix{}}
	if *script {
		return h.script(ctx, *timeout)
	}
	// Show the diagnosis before the prompt, so the first command finds it.
	if _, err := h.waitDiagnosed(ctx, *timeout); err != nil {
		fmt.Fprintln(out, "▶", err)
	}
	fmt.Fprintln(out, "▶ type /hcp help — try: /hcp incidents, /hcp diagnose clusters/proxied, /hcp fix noproxy clusters/proxied, /hcp approve <id>; quit to leave")
	return (&chatops.Console{In: c.stdin, Out: out, Handler: h, Prompt: "hcp> "}).Run(ctx)
}

// demoHandler is the demo's console: bot.Commands answers from the bot's
// state; fixes are proposed and approved here in memory and run through the
// agent's executor. (The shared approval flow with its policy and audit
// trail replaces this outside the demo.)
type demoHandler struct {
	w   *demo.World
	bot *bot.Bot
	out io.Writer
	log zerolog.Logger

	mu        sync.Mutex
	proposals map[string]*diagnose.Fix
}

func (h *demoHandler) commands() *bot.Commands { return &bot.Commands{Bot: h.bot, Actions: h} }

func (h *demoHandler) HandleCommand(ctx context.Context, r chatops.Request) chatops.Reply {
	return h.commands().HandleCommand(ctx, r)
}

func (h *demoHandler) HandleAction(ctx context.Context, r chatops.ActionRequest) chatops.Reply {
	return h.commands().HandleAction(ctx, r)
}

// ProposeNoProxy implements bot.Actions.
func (h *demoHandler) ProposeNoProxy(_ context.Context, _ diagnose.Key, fix *diagnose.Fix, _ []string, _ string) chatops.Reply {
	id := newActionID()
	h.mu.Lock()
	h.proposals[id] = fix
	h.mu.Unlock()
	return chatops.Reply{Text: fmt.Sprintf("Proposal %s for %s:\n%s\nApprove with: /hcp approve %s", id, fix.Target, fix.Diff, id)}
}

// Approve implements bot.Actions.
func (h *demoHandler) Approve(ctx context.Context, id, _ string) chatops.Reply {
	h.mu.Lock()
	fix := h.proposals[id]
	delete(h.proposals, id)
	h.mu.Unlock()
	if fix == nil {
		return chatops.Reply{Text: "No pending proposal " + id}
	}
	if err := h.apply(ctx, fix); err != nil {
		return chatops.Reply{Text: "Fix failed: " + err.Error()}
	}
	go func() { _ = h.w.HealProxied(context.WithoutCancel(ctx), h.out) }()
	return chatops.Reply{Text: fmt.Sprintf("Applied: noProxy of %s is now %q", fix.Target, fix.After)}
}

// Reject implements bot.Actions.
func (h *demoHandler) Reject(_ context.Context, id, _, _ string) chatops.Reply {
	h.mu.Lock()
	_, ok := h.proposals[id]
	delete(h.proposals, id)
	h.mu.Unlock()
	if !ok {
		return chatops.Reply{Text: "No pending proposal " + id}
	}
	return chatops.Reply{Text: "Rejected " + id}
}

// apply runs the fix through the agent's executor (dry run, then a write
// conditional on the noProxy the fix was computed from).
func (h *demoHandler) apply(ctx context.Context, fix *diagnose.Fix) error {
	parts := strings.Split(fix.Target, "/")
	if len(parts) != 3 || parts[0] != "HostedCluster" {
		return fmt.Errorf("unsupported target %q", fix.Target)
	}
	x := &actions.Executor{Dynamic: h.w.Dynamic, Kube: h.w.Kube}
	res, err := x.Execute(ctx, actions.Request{
		ID: newActionID(), Type: actions.TypeNoProxyPatch, RequestedBy: chatops.DefaultConsoleUser,
		Cluster: actions.ClusterRef{Namespace: parts[1], Name: parts[2]},
		NoProxy: &actions.NoProxyParams{Expected: fix.Before, Add: fix.Add},
	})
	if err != nil {
		return err
	}
	h.log.Info().Str("outcome", string(res.Outcome)).Str("summary", res.Summary).Msg("fix executed")
	return nil
}

// waitDiagnosed waits for the proxy-tunnel incident of clusters/proxied.
func (h *demoHandler) waitDiagnosed(ctx context.Context, timeout time.Duration) (bot.Incident, error) {
	k := diagnose.Key{Source: demoSource, Cluster: eventRef(chatops.ClusterRef{Namespace: demo.Namespace, Name: "proxied"})}
	var inc bot.Incident
	if !waitUntil(ctx, timeout, func() bool {
		for _, i := range h.bot.Incidents() {
			if i.Cluster == k && i.Open() && len(i.Diagnoses) > 0 && i.Diagnoses[0].Rule == "proxy-tunnel" && i.Diagnoses[0].Fix != nil {
				inc = i
				return true
			}
		}
		return false
	}) {
		return inc, errors.New("the proxy-tunnel incident of clusters/proxied was not diagnosed")
	}
	return inc, nil
}

// script plays the whole scenario and checks each step.
func (h *demoHandler) script(ctx context.Context, timeout time.Duration) error {
	inc, err := h.waitDiagnosed(ctx, timeout)
	if err != nil {
		return fmt.Errorf("script: %w", err)
	}
	fix := inc.Diagnoses[0].Fix
	fmt.Fprintf(h.out, "✔ diagnosed %s: %s\n", inc.Key, inc.Diagnoses[0].Title)
	if !strings.Contains(","+fix.After+",", ",kubernetes,") {
		return fmt.Errorf("script: the proposed noProxy %q lacks kubernetes", fix.After)
	}
	if err := h.apply(ctx, fix); err != nil {
		return fmt.Errorf("script: apply fix: %w", err)
	}
	fmt.Fprintf(h.out, "✔ fix applied: noProxy %q → %q\n", fix.Before, fix.After)
	if err := h.w.HealProxied(ctx, h.out); err != nil {
		return err
	}
	if !waitUntil(ctx, timeout, func() bool {
		for _, i := range h.bot.Incidents() {
			if i.Key == inc.Key && !i.Open() {
				return true
			}
		}
		return false
	}) {
		return errors.New("script: the incident was not resolved after the fix")
	}
	for _, i := range h.bot.Incidents() {
		if i.Cluster.Cluster.Name == "healthy" {
			return fmt.Errorf("script: the healthy cluster has an incident: %s", i.Key)
		}
	}
	fmt.Fprintf(h.out, "✔ incident %s resolved\n", inc.Key)
	return nil
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cond()
}

func newActionID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "act-" + hex.EncodeToString(b)
}

func eventRef(r chatops.ClusterRef) event.ClusterRef {
	return event.ClusterRef{Namespace: r.Namespace, Name: r.Name}
}

// lockedWriter serialises writes from several goroutines, whole lines at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
