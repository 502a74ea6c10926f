// Package logging sets up zerolog for the hcpbot binary and routes the
// Kubernetes libraries' klog output into it, so a deployment has one
// structured log stream.
package logging

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"

	"github.com/hcpbot/hcpbot/redact"
)

// New returns a logger writing JSON (format "json") or human-readable
// console lines (format "console") at level ("debug", "info", "warn", "error").
func New(out io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	var w io.Writer = out
	switch format {
	case "json", "":
	case "console":
		w = zerolog.ConsoleWriter{Out: out, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Nop(), fmt.Errorf("log format %q: want json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// RouteKlog sends klog (client-go, leader election) to log. klog's verbose
// levels map to debug.
func RouteKlog(log zerolog.Logger) {
	klog.SetLogger(logr.New(&sink{log: log.With().Str("component", "k8s").Logger()}))
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}

type sink struct {
	log  zerolog.Logger
	name string
}

func (s *sink) Init(logr.RuntimeInfo)  {}
func (s *sink) Enabled(level int) bool { return level == 0 || s.log.GetLevel() <= zerolog.DebugLevel }

func (s *sink) Info(level int, msg string, kv ...any) {
	ev := s.log.Info()
	if level > 0 {
		ev = s.log.Debug()
	}
	s.emit(ev, msg, kv)
}

func (s *sink) Error(err error, msg string, kv ...any) {
	s.emit(s.log.Error().Err(redactErr(err)), msg, kv)
}

func (s *sink) emit(ev *zerolog.Event, msg string, kv []any) {
	if s.name != "" {
		ev = ev.Str("logger", s.name)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		// client-go can log request URLs and objects: strip any credentials.
		ev = ev.Str(k, redact.RedactText(fmt.Sprint(kv[i+1])))
	}
	ev.Msg(redact.RedactText(msg))
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	ctx := s.log.With()
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		ctx = ctx.Str(k, redact.RedactText(fmt.Sprint(kv[i+1])))
	}
	return &sink{log: ctx.Logger(), name: s.name}
}

func (s *sink) WithName(name string) logr.LogSink {
	n := name
	if s.name != "" {
		n = s.name + "/" + name
	}
	return &sink{log: s.log, name: n}
}

type redactedError struct{ msg string }

func (e redactedError) Error() string { return e.msg }

func redactErr(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{redact.RedactText(err.Error())}
}
