//go:build !nodemo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/demo"
	"github.com/hcpbot/hcpbot/internal/logging"
)

func init() {
	extraCommands = append(extraCommands, command{name: "demo", summary: demoSummary, run: runDemo})
}

const demoSource = "local"

// The two people at the demo's console, by name, with the Slack-shaped
// user IDs the config names as approvers: four-eyes needs two.
var demoUsers = map[string]string{"alice": "U0000ALICE", "bob": "U00000BOB"}

// demoChannel is the demo's bot.defaultChannel (the console notifier
// only prints it).
const demoChannel = "CDEMOCONSOLE"

func runDemo(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("demo", "[--script] [--dir DIR]")
	script := fs.Bool("script", false, "play the scenario end to end without a terminal; exit 0 only if diagnosed, fixed through a four-eyes approval, audited and resolved")
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
	out := &lockedWriter{w: c.stdout, keep: *script}

	w, err := demo.Start(ctx, *dir, out, os.Stderr)
	if err != nil {
		return err
	}
	defer w.Stop()
	cfg, sec, err := demoConfig(c, *dir, w.Kubeconfig)
	if err != nil {
		return err
	}
	if sec.SlackBotToken != "" {
		fmt.Fprintf(out, "▶ posting to Slack channel %s\n", cfg.Bot.DefaultChannel)
	}

	// Agent and bot run exactly as `hcpbot all --config` runs them; only
	// the chat transport differs: the console, handed the bot's command
	// handler once it is wired.
	type wired struct {
		bot      *bot.Bot
		commands chatops.Handler
	}
	ready := make(chan wired, 1)
	pc := *c
	pc.stdout, pc.stderr = out, logFile
	pc.chat = func(b *bot.Bot, h chatops.Handler) { ready <- wired{b, h} }
	pc.users = demoUsers
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runConfigured(runCtx, &pc, cfg, sec, "all", log) }()
	stop := func() error {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("agent + bot: %w", err)
		}
		return nil
	}
	var p wired
	select {
	case p = <-ready:
	case err := <-done:
		cancel()
		return fmt.Errorf("agent + bot did not start: %w", err)
	case <-ctx.Done():
		_ = stop()
		return ctx.Err()
	}

	fmt.Fprintf(out, "▶ agent + bot running as `hcpbot all --config %s`: embedded NATS JetStream (%s), proposals in the approval store (NATS KV), every decision on the audit stream, approved fixes sent to the agent signed; logs in %s\n",
		cfg.File, cfg.NATS.StoreDir, logFile.Name())
	fmt.Fprintf(out, "▶ look with kubectl:  export KUBECONFIG=%s\n", w.Kubeconfig)
	s := &demoSession{w: w, bot: p.bot, commands: p.commands, out: out, console: sec.SlackBotToken == ""}
	var healer sync.WaitGroup
	err = w.BreakProxied(ctx, out)
	if err == nil {
		// The demo world's stand-in for HyperShift: it rolls out once the
		// agent has changed the HostedCluster.
		healer.Go(func() { _ = w.HealWhenFixed(runCtx, out) })
		if *script {
			err = s.script(ctx, *timeout)
		} else {
			err = s.interactive(ctx, c.stdin, *timeout)
		}
	}
	err = errors.Join(err, stop())
	healer.Wait() // before the world stops
	return err
}

// demoConfig is the configuration the demo runs: a file in dir, read and
// validated like any (configs.Load), for one local management cluster on
// the embedded NATS server, with approvals under four-eyes by the two
// console users. Its slack section only satisfies the schema: no secret
// is read from it. With SLACK_BOT_TOKEN and HCPBOT_SLACK_CHANNEL set the
// bot also posts to that Slack channel (SLACK_API_URL for another API).
func demoConfig(c *cli, dir, kubeconfig string) (*configs.Config, *configs.Secrets, error) {
	sec := &configs.Secrets{}
	channel := demoChannel
	apiURL := ""
	if token, ch := c.getenv("SLACK_BOT_TOKEN"), c.getenv("HCPBOT_SLACK_CHANNEL"); token != "" && ch != "" {
		sec.SlackBotToken, channel = token, ch
		if u := c.getenv("SLACK_API_URL"); u != "" {
			apiURL = fmt.Sprintf("\n  apiURL: %q", u)
		}
	}
	ids := make([]string, 0, len(demoUsers))
	for _, id := range demoUsers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	yaml := fmt.Sprintf(`# Written by hcpbot demo: what it runs, as `+"`hcpbot all --config`"+` would.
# The listen addresses are replaced by loopback ports chosen at start.
nats:
  storeDir: %q
agent:
  source: %s
  kubeconfig: %q
  listen: "127.0.0.1:8080"
  hostedProbeInterval: 2s
bot:
  listen: "127.0.0.1:8081"
  opsListen: "127.0.0.1:8082"
  # Short waits: the demo shows the whole life of an incident in a minute.
  groupWait: 2s
  groupInterval: 5s
  resolveTimeout: 1s
  defaultChannel: %s
# The console stands in for Slack; the demo reads no secret from here.
slack:%s
  botTokenEnv: SLACK_BOT_TOKEN
  signingSecretEnv: SLACK_SIGNING_SECRET
approvals:
  approvers: [%s]
  fourEyes: true
# Who the agent acts as on each approval: the approver's own Kubernetes
# identity (the demo grants group %[7]s get and patch of the
# HostedClusters in %[8]s), so that cluster RBAC decides and the API
# server's audit log names the person. required: nobody else's rights.
identities:
  required: true
  map:
    - {slack: %[9]s, user: alice, groups: [%[7]s]}
    - {slack: %[10]s, user: bob, groups: [%[7]s]}
log: {level: info, format: json}
`, filepath.Join(dir, "nats"), demoSource, kubeconfig, channel, apiURL, strings.Join(ids, ", "), demo.ApproversGroup, demo.Namespace,
		demoUsers["alice"], demoUsers["bob"])
	path := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		return nil, nil, err
	}
	cfg, err := configs.Load(path)
	if err != nil {
		return nil, nil, err
	}
	// Any free loopback port: two demos, or a demo beside a bot, can run
	// on one machine. (A file may not say port 0: probes need fixed ports.)
	cfg.Agent.Listen, cfg.Bot.Listen, cfg.Bot.OpsListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	return cfg, sec, nil
}

// demoSession drives the demo's console: the bot's own command handler,
// as Slack would reach it, with two users.
type demoSession struct {
	w        *demo.World
	bot      *bot.Bot
	commands chatops.Handler
	out      *lockedWriter
	// console: incidents are posted to the console (not to Slack).
	console bool
}

func (s *demoSession) chat(in io.Reader, user, prompt string) *chatops.Console {
	return &chatops.Console{In: in, Out: s.out, Handler: s.commands, UserID: demoUsers[user], Users: demoUsers, Prompt: prompt}
}

func (s *demoSession) interactive(ctx context.Context, in io.Reader, timeout time.Duration) error {
	// Show the diagnosis before the prompt, so the first command finds it.
	if _, err := s.waitDiagnosed(ctx, timeout); err != nil {
		fmt.Fprintln(s.out, "▶", err)
	}
	fmt.Fprintln(s.out, "▶ type /hcp help — try: /hcp incidents, /hcp diagnose clusters/proxied, /hcp fix noproxy clusters/proxied,")
	fmt.Fprintln(s.out, "  then `as bob` and /hcp approve <id> (four-eyes: alice proposes, bob approves), /hcp audit, /hcp whoami; quit to leave")
	fmt.Fprintf(s.out, "  the agent writes as the approver's Kubernetes user: kubectl get events -n %s shows it\n", demo.Namespace)
	err := s.chat(in, "alice", "hcp> ").Run(ctx)
	if ctx.Err() != nil {
		return nil // interrupted: the usual way out
	}
	return err
}

// say runs one console line as user, printed as typed, and returns the
// reply's text (before it is flattened for the terminal).
func (s *demoSession) say(ctx context.Context, user, line string) (*replyRecorder, error) {
	fmt.Fprintf(s.out, "[%s] hcp> %s\n", user, line)
	rec := &replyRecorder{Handler: s.commands}
	con := s.chat(strings.NewReader(line+"\n"), user, "")
	con.Handler = rec
	if err := con.Run(ctx); err != nil {
		return nil, err
	}
	return rec, nil
}

// replyRecorder keeps the last reply of the handler it wraps, and what
// the handler posts into the conversation later (an approval's outcome).
type replyRecorder struct {
	chatops.Handler
	mu    sync.Mutex
	last  string
	later []string
}

func (r *replyRecorder) HandleCommand(ctx context.Context, req chatops.Request) chatops.Reply {
	if post := chatops.Later(ctx); post != nil {
		ctx = chatops.WithLater(ctx, func(rep chatops.Reply) {
			r.mu.Lock()
			r.later = append(r.later, rep.Text)
			r.mu.Unlock()
			post(rep)
		})
	}
	rep := r.Handler.HandleCommand(ctx, req)
	r.mu.Lock()
	r.last = rep.Text
	r.mu.Unlock()
	return rep
}

// text is the answer, then every later post.
func (r *replyRecorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(append([]string{r.last}, r.later...), "\n")
}

// waitDiagnosed waits for the proxy-tunnel incident of clusters/proxied.
func (s *demoSession) waitDiagnosed(ctx context.Context, timeout time.Duration) (bot.Incident, error) {
	k := diagnose.Key{Source: demoSource, Cluster: event.ClusterRef{Namespace: demo.Namespace, Name: "proxied"}}
	var inc bot.Incident
	if !waitUntil(ctx, timeout, func() bool {
		for _, i := range s.bot.Incidents() {
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

// posted waits until the console notifier has printed what (after the
// first from bytes of output); at once when incidents go to Slack.
func (s *demoSession) posted(ctx context.Context, timeout time.Duration, what string, from int) error {
	if !s.console {
		return nil
	}
	if !waitUntil(ctx, timeout, func() bool { ok, _ := s.out.shown(what, from); return ok }) {
		return fmt.Errorf("script: the console never showed %q", what)
	}
	return nil
}

var proposalIDRE = regexp.MustCompile("proposes `(act-[a-z0-9]+)`")

// script plays the whole scenario through the console, as two users, and
// checks each step against what the bot answers: the proposal stored,
// the proposer refused as approver (four-eyes), the second approval
// executed by the agent, the audit trail listing all of it, the incident
// resolved.
func (s *demoSession) script(ctx context.Context, timeout time.Duration) error {
	inc, err := s.waitDiagnosed(ctx, timeout)
	if err != nil {
		return fmt.Errorf("script: %w", err)
	}
	fix := inc.Diagnoses[0].Fix
	fmt.Fprintf(s.out, "✔ diagnosed %s: %s\n", inc.Key, inc.Diagnoses[0].Title)
	// The incident message first (after bot.groupWait), as the channel
	// would see it, then the people answering it.
	if err := s.posted(ctx, timeout, "● NEW "+inc.Key, 0); err != nil {
		return err
	}
	if !strings.Contains(","+fix.After+",", ",kubernetes,") {
		return fmt.Errorf("script: the proposed noProxy %q lacks kubernetes", fix.After)
	}
	steps := []struct {
		user, line string
		want       []string // in the answer, or in a later post (the outcome)
		done       string
	}{
		{"alice", "/hcp fix noproxy clusters/proxied", []string{"proposes `act-"}, "proposed by alice, stored in the approval store"},
		{"alice", "/hcp approve ID", []string{"Four-eyes rule"}, "four-eyes: alice may not approve her own proposal"},
		{"bob", "/hcp approve ID", []string{"approved by", string(actions.OutcomeApplied)}, "approved by bob, executed by the agent"},
	}
	id := ""
	for _, st := range steps {
		rec, err := s.say(ctx, st.user, strings.ReplaceAll(st.line, "ID", id))
		if err != nil {
			return fmt.Errorf("script: %w", err)
		}
		has := func() bool {
			for _, w := range st.want {
				if !strings.Contains(rec.text(), w) {
					return false
				}
			}
			return true
		}
		if !waitUntil(ctx, timeout, has) {
			return fmt.Errorf("script: %q as %s: the replies lack one of %q:\n%s", st.line, st.user, st.want, rec.text())
		}
		text := rec.text()
		if id == "" {
			m := proposalIDRE.FindStringSubmatch(text)
			if m == nil {
				return fmt.Errorf("script: no proposal id in %q", text)
			}
			id = m[1]
		}
		fmt.Fprintf(s.out, "✔ %s %s\n", id, st.done)
	}
	if err := s.showWriter(ctx, timeout, id, "bob"); err != nil {
		return fmt.Errorf("script: %w", err)
	}
	if !waitUntil(ctx, timeout, func() bool {
		for _, i := range s.bot.Incidents() {
			if i.Key == inc.Key && !i.Open() {
				return true
			}
		}
		return false
	}) {
		return errors.New("script: the incident was not resolved after the fix")
	}
	_, resolvedAt := s.out.shown("", 0)
	for _, i := range s.bot.Incidents() {
		if i.Cluster.Cluster.Name == "healthy" {
			return fmt.Errorf("script: the healthy cluster has an incident: %s", i.Key)
		}
	}
	fmt.Fprintf(s.out, "✔ incident %s resolved\n", inc.Key)
	if err := s.posted(ctx, timeout, "● UPDATE "+inc.Key, resolvedAt); err != nil {
		return err
	}
	rec, err := s.say(ctx, "alice", "/hcp audit")
	if err != nil {
		return fmt.Errorf("script: %w", err)
	}
	text := rec.text()
	for _, kind := range []string{"proposed", "refused", "approved", "executed"} {
		if !strings.Contains(text, kind+" "+id) {
			return fmt.Errorf("script: the audit trail lacks %q:\n%s", kind+" "+id, text)
		}
	}
	fmt.Fprintf(s.out, "✔ the audit stream lists %s proposed, refused (four-eyes), approved and executed\n", id)
	return nil
}

// showWriter shows who the agent wrote id's change as: the API server's
// audit log (the agent's user impersonating the approver, with the action
// id) and the Event on the HostedCluster (kubectl get events -n clusters).
func (s *demoSession) showWriter(ctx context.Context, timeout time.Duration, id, user string) error {
	var write demo.Write
	if !waitUntil(ctx, timeout, func() bool {
		ws, err := s.w.WritesOf(id)
		if err != nil {
			return false
		}
		for _, w := range ws {
			if w.Verb == "patch" && w.Code == 200 {
				write = w
				return true
			}
		}
		return false
	}) {
		return fmt.Errorf("the API server's audit log holds no write of %s", id)
	}
	if write.As != user {
		return fmt.Errorf("the write of %s ran as %q, not as %s", id, write.As, user)
	}
	fmt.Fprintf(s.out, "✔ the API server's audit log: %s %s by %s as user %s (groups %s), action %s\n",
		write.Verb, write.Object, write.By, write.As, strings.Join(write.AsGroups, ", "), id)
	var msg string
	if !waitUntil(ctx, timeout, func() bool {
		evs, err := s.w.Kube.CoreV1().Events(demo.Namespace).List(ctx, metav1.ListOptions{LabelSelector: actions.LabelActionID + "=" + id})
		if err != nil || len(evs.Items) == 0 {
			return false
		}
		msg = evs.Items[0].Message
		return true
	}) {
		return fmt.Errorf("no Event of %s in %s", id, demo.Namespace)
	}
	fmt.Fprintf(s.out, "✔ kubectl get events -n %s: %s\n", demo.Namespace, msg)
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

// lockedWriter serialises writes from several goroutines, whole lines at
// a time. With keep it also keeps what was written, for shown.
type lockedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	keep bool
	kept strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keep {
		l.kept.Write(p)
	}
	return l.w.Write(p)
}

// shown reports whether s was written after the first from bytes (only
// with keep), and how many bytes were written so far.
func (l *lockedWriter) shown(s string, from int) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.kept.String()[from:], s), l.kept.Len()
}
