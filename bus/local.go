package bus

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/partition"
)

// Role is a NATS user of hcpbot: the bot (all its replicas; the zero
// Role) or the agent of one management cluster. Its rights are
// BotPermissions or AgentPermissions.
type Role struct {
	source string // "" for the bot
}

// BotRole is the bot's user.
func BotRole() Role { return Role{} }

// AgentRole is the user of the agent of source.
func AgentRole(source string) Role { return Role{source: source} }

// Agent reports the source of an agent's role; false for the bot.
func (r Role) Agent() (string, bool) { return r.source, r.source != "" }

// String names the role in logs: "bot" or "agent <source>".
func (r Role) String() string {
	if r.source == "" {
		return "bot"
	}
	return "agent " + r.source
}

// InboxPrefix is where the role's replies arrive (event.BotInboxPrefix,
// event.AgentInboxPrefix): the only subjects its user may subscribe to
// besides the restatement requests.
func (r Role) InboxPrefix() (string, error) {
	if r.source == "" {
		return event.BotInboxPrefix, nil
	}
	return event.AgentInboxPrefix(r.source)
}

// Permissions are the role's rights, as nats.conf grants them, with one
// bot group.
func (r Role) Permissions() (*server.Permissions, error) {
	return r.PermissionsIn(partition.Set{})
}

// PermissionsIn are the role's rights with the bot groups of set: an
// agent's events are stored tagged with its group
// (AgentPermissionsIn).
func (r Role) PermissionsIn(set partition.Set) (*server.Permissions, error) {
	if r.source == "" {
		return BotPermissions(), nil
	}
	return AgentPermissionsIn(r.source, set)
}

// fileName is the role's seed file under the store's keys folder.
func (r Role) fileName() string {
	if r.source == "" {
		return "bot.seed"
	}
	return "agent-" + r.source + ".seed"
}

// ownerInbox is the reply prefix of the owner's connection.
const ownerInbox = "_INBOX_owner"

// ownerPermissions: what the process that runs the server does in its own
// name, without a role: create the events stream, which a process without
// a bot (a standalone agent) needs and the agent's role may not create,
// and bring it to the configured settings, which no role may
// (Local.ApplyStream). Nothing else.
func ownerPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			jsStreamAPI("CREATE", EventsStreamName), jsStreamAPI("INFO", EventsStreamName), jsStreamAPI("UPDATE", EventsStreamName),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{ownerInbox + ".>"}},
	}
}

// KeysDir is the folder under the store where a listening embedded server
// writes the seeds of this start (LocalConfig.Listen).
const KeysDir = "keys"

// LocalConfig configures the product's embedded server (StartLocal).
type LocalConfig struct {
	// StoreDir holds JetStream's files (required) and, with Listen, the
	// seeds of this start (KeysDir).
	StoreDir string
	// Name is the server name; default "hcpbot".
	Name string
	// Listen ("host:port"; an empty host is every interface, port 0 any
	// free one) makes the server accept TCP clients there too, each with
	// one of the keys of this start (Local.SeedFile). Empty, the default:
	// no listener at all, in-process connections only.
	Listen string
	// Agents are the sources of the agents this process runs: each gets a
	// user with AgentPermissions. The bot's user always exists.
	Agents []string
	// SyncAlways, as EmbeddedConfig.SyncAlways.
	SyncAlways bool
	// Partitions are the bot groups (bot.partitions, bot.partitionMap):
	// with more than one, the server tags every event with its group
	// (partition.Set.Mappings) and each agent may publish on its own
	// group's tag only (AgentPermissionsIn).
	Partitions partition.Set
}

// Local is the product's embedded server: no anonymous user, a user per
// role with that role's permissions (the same split as nats.conf), each
// with an nkey made for this start, and no client listener unless one is
// configured. The process connects each role in-process with its own key
// (Local.Connect), so the agent of `hcpbot all` has exactly a deployed
// agent's rights.
type Local struct {
	e     *Embedded
	keys  map[Role]nkeys.KeyPair
	owner nkeys.KeyPair
	// seedFiles are the files the keys of this start were written to
	// (only with Listen), by role.
	seedFiles map[Role]string
}

// StartLocal starts the embedded server and returns once it accepts
// clients. The server's own log lines go to log with component
// "nats-server"; one line says what it listens on and that
// authentication is required. Seeds are never logged; with Listen, their
// files are (mode 0600, in StoreDir/KeysDir).
func StartLocal(ctx context.Context, cfg LocalConfig, log zerolog.Logger) (*Local, error) {
	if cfg.StoreDir == "" {
		return nil, ErrStoreDirRequired
	}
	roles := []Role{BotRole()}
	for _, src := range cfg.Agents {
		if r := AgentRole(src); !slices.Contains(roles, r) {
			roles = append(roles, r)
		}
	}
	l := &Local{keys: make(map[Role]nkeys.KeyPair, len(roles)), seedFiles: map[Role]string{}}
	users := make([]*server.NkeyUser, 0, len(roles)+1)
	for _, r := range roles {
		perms, err := r.PermissionsIn(cfg.Partitions)
		if err != nil {
			return nil, err
		}
		kp, pub, err := newUserKey()
		if err != nil {
			return nil, err
		}
		l.keys[r] = kp
		users = append(users, &server.NkeyUser{Nkey: pub, Permissions: perms})
	}
	kp, pub, err := newUserKey()
	if err != nil {
		return nil, err
	}
	l.owner = kp
	// The owner's key never leaves this process: it is refused over TCP
	// even if it did.
	users = append(users, &server.NkeyUser{Nkey: pub, Permissions: ownerPermissions(),
		AllowedConnectionTypes: map[string]struct{}{jwt.ConnectionTypeInProcess: {}}})

	ecfg := EmbeddedConfig{
		StoreDir: cfg.StoreDir, Name: orDefault(cfg.Name, defaultName), SyncAlways: cfg.SyncAlways,
		Users: users, InProcessOnly: cfg.Listen == "", Mappings: cfg.Partitions.Mappings(),
		Logger: log.With().Str("component", "nats-server").Logger(),
	}
	if cfg.Listen != "" {
		host, port, err := splitListen(cfg.Listen)
		if err != nil {
			return nil, err
		}
		ecfg.Host, ecfg.Port = host, port
	}
	if l.e, err = StartEmbedded(ctx, ecfg); err != nil {
		return nil, err
	}
	if cfg.Listen != "" {
		if err := l.writeSeeds(filepath.Join(cfg.StoreDir, KeysDir)); err != nil {
			l.Shutdown()
			return nil, err
		}
	}
	l.logStart(log, roles)
	return l, nil
}

func newUserKey() (nkeys.KeyPair, string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("bus: nkey for the embedded server: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, "", fmt.Errorf("bus: nkey for the embedded server: %w", err)
	}
	return kp, pub, nil
}

// splitListen reads "host:port"; an empty host is every interface.
func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("bus: embedded listen address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bus: embedded listen address %q: bad port", addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// writeSeeds writes each role's seed to its own file in dir, mode 0600
// (the folder 0700), replacing the previous start's: a client started
// from the file after this start finds this start's key.
func (l *Local) writeSeeds(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bus: embedded server keys folder: %w", err)
	}
	// A folder made earlier with a wider mode is narrowed.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("bus: embedded server keys folder: %w", err)
	}
	for r, kp := range l.keys {
		seed, err := kp.Seed()
		if err != nil {
			return fmt.Errorf("bus: seed of %s: %w", r, err)
		}
		path := filepath.Join(dir, r.fileName())
		if err := writeSecretFile(path, seed); err != nil {
			return fmt.Errorf("bus: seed file of %s: %w", r, err)
		}
		l.seedFiles[r] = path
	}
	return nil
}

// writeSecretFile replaces path with data, mode 0600, never showing a
// partial file: written aside, then renamed.
func writeSecretFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".seed-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone after the rename; removes a failed write
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// logStart says what the server listens on and that authentication is
// required, with the seed files (never the seeds).
func (l *Local) logStart(log zerolog.Logger, roles []Role) {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = r.String()
	}
	addr := l.e.Listening()
	if addr == nil {
		log.Info().Strs("users", names).
			Msg("embedded NATS server started: no listener, in-process connections only; authentication required (an nkey per role, made for this start)")
		return
	}
	ev := log.Info()
	msg := "embedded NATS server started: listening on " + addr.String() + "; authentication required (an nkey per role, made for this start; seed files logged, seeds never), no TLS"
	if !addr.IP.IsLoopback() {
		ev = log.Warn()
		msg += ", and NOT on loopback: the traffic can be read on the network (the seeds never travel)"
	}
	files := zerolog.Dict()
	for _, r := range roles {
		files.Str(r.String(), l.seedFiles[r])
	}
	ev.Str("listen", addr.String()).Strs("users", names).Dict("seedFiles", files).Msg(msg)
}

// Connect connects role in-process with its key: the connection has the
// role's rights and inbox prefix, whatever cfg says about URLs,
// credentials and inbox. It does not own the server.
func (l *Local) Connect(ctx context.Context, role Role, cfg Config, log zerolog.Logger) (*Conn, error) {
	kp, ok := l.keys[role]
	if !ok {
		return nil, fmt.Errorf("bus: the embedded server has no user for %s", role)
	}
	inbox, err := role.InboxPrefix()
	if err != nil {
		return nil, err
	}
	return l.connect(ctx, kp, inbox, cfg, log)
}

func (l *Local) connect(ctx context.Context, kp nkeys.KeyPair, inbox string, cfg Config, log zerolog.Logger) (*Conn, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("bus: embedded server key: %w", err)
	}
	cfg.URLs, cfg.CredsFile, cfg.Creds, cfg.NkeySeedFile, cfg.User, cfg.Password, cfg.Token, cfg.CAFile, cfg.Dialer =
		nil, "", nil, "", "", "", "", "", nil
	cfg.InboxPrefix = inbox
	// The URL only names the server in logs: an in-process connection
	// dials nothing.
	return dial(ctx, cfg, []string{inProcessURL}, []nats.Option{nats.InProcessServer(l.e), nats.Nkey(pub, kp.Sign)}, log)
}

// inProcessURL names an in-process connection's server in logs.
const inProcessURL = "nats://in-process"

// CreateStream creates spec's stream while it is absent and otherwise
// leaves it as it is (bus.CreateStream), in the name of the process that
// runs the server, not of a role: a standalone agent needs the events
// stream, which its role may not create. The owner's user may create the
// events stream and nothing else, only in-process, with a key that never
// leaves this process; its connection lasts this call.
func (l *Local) CreateStream(ctx context.Context, spec StreamSpec, log zerolog.Logger) (jetstream.Stream, error) {
	return l.asOwner(ctx, "creates", spec, log, func(js jetstream.StreamManager) (jetstream.Stream, error) {
		return CreateStream(ctx, js, spec)
	})
}

// ApplyStream brings the events stream to spec in the owner's name,
// creating it while absent: on its own server the process is trusted with
// every key, so the configured settings (max age, duplicate window) apply
// whichever of agent and bot created the stream, although no role may
// update a stream: the bot's, or on a standalone agent's server those its
// file writes (EventsSettings.Over). Only the events stream, and only to
// spec: whatever else a stream holds (sources, a republish) is replaced
// with it.
func (l *Local) ApplyStream(ctx context.Context, spec StreamSpec, log zerolog.Logger) (jetstream.Stream, error) {
	cfg := spec.config()
	return l.asOwner(ctx, "applies", spec, log, func(js jetstream.StreamManager) (jetstream.Stream, error) {
		return retryEnsure(ctx, "stream", spec.Name, func(ctx context.Context) (jetstream.Stream, error) {
			return js.CreateOrUpdateStream(ctx, cfg)
		})
	})
}

// ApplyEventsSettings creates the events stream while absent, with set's
// settings and the defaults for the others, and brings an existing one to
// those set writes, keeping its others (EventsSettings.Over), in the
// owner's name: on its own server no role may change the stream, so
// without it a standalone agent's changed setting would never take
// effect. changed names what it changed ("field: was → now"); left what
// set writes that the stream still lacks (a duplicate window beyond the
// max age set leaves to the stream: JetStream caps it at the max age).
func (l *Local) ApplyEventsSettings(ctx context.Context, set EventsSettings, log zerolog.Logger) (s jetstream.Stream, changed, left []string, err error) {
	if s, err = l.CreateStream(ctx, set.Spec(), log); err != nil {
		return nil, nil, nil, err
	}
	have := s.CachedInfo().Config
	if len(set.Drift(have)) == 0 {
		return s, nil, nil, nil
	}
	want := set.Over(have)
	if changed = settingsDrift(have, want); len(changed) > 0 {
		if s, err = l.ApplyStream(ctx, want, log); err != nil {
			return nil, nil, nil, err
		}
	}
	return s, changed, set.Drift(s.CachedInfo().Config), nil
}

// asOwner runs do on a connection of the owner's, for the events stream
// only.
func (l *Local) asOwner(ctx context.Context, verb string, spec StreamSpec, log zerolog.Logger, do func(jetstream.StreamManager) (jetstream.Stream, error)) (jetstream.Stream, error) {
	if spec.Name != EventsStreamName {
		return nil, fmt.Errorf("bus: the embedded server's owner %s %s only, not %s", verb, EventsStreamName, spec.Name)
	}
	c, err := l.connect(ctx, l.owner, ownerInbox, Config{Name: "hcpbot-owner"}, log)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return do(c.JS)
}

// SeedFile is the file holding role's seed of this start, "" without a
// listener (nothing is written then).
func (l *Local) SeedFile(role Role) string { return l.seedFiles[role] }

// Listening is the address clients can dial, nil without a listener.
func (l *Local) Listening() *net.TCPAddr { return l.e.Listening() }

// Server exposes the running server, for tests and health checks.
func (l *Local) Server() *server.Server { return l.e.Server() }

// Shutdown stops the server and waits until it has stopped, then removes
// the seed files of this start: its keys are worthless from now on. Safe
// to call more than once.
func (l *Local) Shutdown() {
	l.e.Shutdown()
	for _, path := range l.seedFiles {
		// Best effort: a file left behind holds a key no server knows.
		_ = os.Remove(path)
	}
}
