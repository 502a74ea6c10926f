package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/internal/logging"
)

// cli carries what a subcommand may touch, so tests run commands in-process
// with their own streams and environment.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// serviceAccount is the folder where the kubelet mounts a pod's
	// service account (token, ca.crt); empty, the kubelet's own. With
	// getenv it is all that loading the agent's kube client reads of the
	// host (host), so tests give the command a host of their own.
	serviceAccount string
	// routeKlog sends the Kubernetes libraries' klog output to the logger.
	// klog is process-global, so only the real main sets it; in-process
	// tests leave it nil.
	routeKlog func(zerolog.Logger)
	// chat, when set, is handed the bot and the handler of its commands
	// once they are wired, before the bot runs: a chat transport inside
	// the process (the demo's console). Nil in the real commands, where
	// Slack reaches the handler over HTTP or Socket Mode.
	chat func(*bot.Bot, chatops.Handler)
	// users are the people of an in-process chat (name → Slack user ID),
	// named in what the console prints instead of their IDs.
	users map[string]string
}

// command is one subcommand. Subcommands register themselves in commands()
// from their own files; run gets the arguments after the subcommand name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

// errUsage marks an error caused by the caller's arguments: main prints it
// with a hint and exits 2 instead of 1.
var errUsage = errors.New("usage")

func usageErrorf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

func commands() []command {
	cmds := []command{
		{name: "version", summary: "print the version and exit", run: runVersion},
	}
	cmds = append(cmds, extraCommands...)
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	return cmds
}

// demoSummary describes `hcpbot demo` in every build (release builds
// leave the demo out: demo_nodemo.go).
const demoSummary = "run agent + bot (as hcpbot all) on a local control plane, with a console for Slack, and play the seed 000 incident"

// extraCommands is appended to by the init functions of the other files in
// this package, one file per subcommand.
var extraCommands []command

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, routeKlog: logging.RouteKlog}
	os.Exit(c.main(ctx, os.Args[1:]))
}

// main runs one command line and returns the process exit code.
func (c *cli) main(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		c.help(c.stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, cmd := range commands() {
		if cmd.name != args[0] {
			continue
		}
		err := cmd.run(ctx, c, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(c.stderr, "hcpbot %s: %v\nRun 'hcpbot %s --help' for usage.\n", cmd.name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "), cmd.name)
			return 2
		default:
			fmt.Fprintf(c.stderr, "hcpbot %s: %v\n", cmd.name, err)
			return 1
		}
	}
	fmt.Fprintf(c.stderr, "hcpbot: unknown command %q\n\n", args[0])
	c.help(c.stderr)
	return 2
}

func (c *cli) help(w io.Writer) {
	fmt.Fprintln(w, "hcpbot — chat-ops for hosted control planes behind HTTP proxies")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: hcpbot <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'hcpbot <command> --help' for the flags of a command.")
}

// klog routes klog to log when the process allows it (see cli.routeKlog).
func (c *cli) klog(log zerolog.Logger) {
	if c.routeKlog != nil {
		c.routeKlog(log)
	}
}

// flagSet returns a FlagSet that writes its usage to the command's stderr and
// reports parse errors instead of exiting.
func (c *cli) flagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("hcpbot "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: hcpbot %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses flags (parse) for a command that takes no
// arguments, and refuses it without the string flags named required.
func parseFlags(fs *flag.FlagSet, args []string, required ...string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q", fs.Arg(0))
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			return usageErrorf("--%s is required", name)
		}
	}
	return nil
}

// subcommand is one subcommand of a command that has them (config,
// noproxy): run gets the arguments after its name.
type subcommand struct {
	name string
	run  func(args []string) error
}

// runSubcommand runs the one of subs that args[0] names, or prints usage
// for help.
func (c *cli) runSubcommand(usage string, args []string, subs ...subcommand) error {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if len(args) == 0 {
		return usageErrorf("missing subcommand: %s", want)
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(args[1:])
		}
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(c.stdout, usage)
		return flag.ErrHelp
	}
	return usageErrorf("unknown subcommand %q: want %s", args[0], want)
}

// parse parses flags; a parse error is a usage error (already printed by flag).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}
