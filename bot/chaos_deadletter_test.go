package bot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// dlMarker is written into every bad message; it must never reach a log
// line or a Slack call.
const dlMarker = "CHAOSDLMARKER7f3a"

// dlBadKind is one way an event on the stream can be unusable.
type dlBadKind struct {
	name   string
	reason string // hcpbot_bot_events_dead_lettered_total{reason}
	data   func(t *testing.T, template []byte) []byte
}

// dlEditEnvelope decodes template into a map, lets f change it and encodes
// it again.
func dlEditEnvelope(t *testing.T, template []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(template, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dlBadKinds() []dlBadKind {
	return []dlBadKind{
		{"truncated", "malformed", func(t *testing.T, tpl []byte) []byte {
			// The marker is in the payload's message, near the end: cut
			// just before the closing braces so it is kept.
			return tpl[:len(tpl)-3]
		}},
		{"non-json", "malformed", func(t *testing.T, _ []byte) []byte {
			return append([]byte{0xff, 0xfe, 0x00, 0x01}, []byte(dlMarker+" \x00\x1b[31m binary")...)
		}},
		{"future-version", "unsupported_version", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) { m["v"] = 2 })
		}},
		{"future-version-reshaped", "unsupported_version", func(t *testing.T, tpl []byte) []byte {
			// A v2 envelope this build's struct cannot even hold.
			return dlEditEnvelope(t, tpl, func(m map[string]any) { m["v"] = 2; m["time"] = []any{dlMarker} })
		}},
		{"oversized", "too_large", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) {
				m["payload"].(map[string]any)["message"] = strings.Repeat(dlMarker+" ", event.MaxSize/len(dlMarker)+64)
			})
		}},
		// An agent may publish only its own source's subjects; an event
		// claiming another source there is a forgery.
		{"another-source", "wrong_source", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) { m["source"] = "mgmt-other" })
		}},
		{"unknown-type", "unknown_type", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) {
				m["type"] = "quantumflux"
				m["payload"] = map[string]any{"note": dlMarker}
			})
		}},
		{"malformed-payload", "malformed", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) {
				m["payload"] = map[string]any{"node": []any{dlMarker}, "ready": 7, "message": dlMarker}
			})
		}},
		{"malformed-payload-time", "malformed", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) {
				p := m["payload"].(map[string]any)
				p["lastTransitionTime"] = dlMarker
			})
		}},
		{"malformed-envelope-time", "malformed", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) { m["time"] = dlMarker })
		}},
		{"payload-null", "malformed", func(t *testing.T, tpl []byte) []byte {
			return dlEditEnvelope(t, tpl, func(m map[string]any) { m["payload"] = nil; m["note"] = dlMarker })
		}},
	}
}

// A storm's good events interleaved with every kind of bad one on the real
// events stream: the bot's consumer applies every good event (the
// incidents come out right), dead-letters and counts every bad one by
// reason, never stalls behind one, and logs none of their content.
func TestChaosDeadLetters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	js := natsJS(t)
	rec := slackrec.New(t)

	// The bot's (and notifier's) log, searched for the marker.
	var logs syncbuf.Buffer
	log := zerolog.New(&logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bot log (tail):\n%s", dlTail(logs.String(), 4000))
		}
	})
	store, err := notify.NewKVStore(ctx, js, notify.KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Store: store, Log: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.StormThreshold = -1 // one incident per cluster, checked one by one
	b := bot.New(cfg, js, n, reg, log)
	rctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(rctx) })
	wg.Go(func() { _ = b.Run(rctx) })
	t.Cleanup(func() { stop(); wg.Wait() })

	const source = "mgmt-deadletter"
	clusters := chaosreport.Pick(4, 40)
	nodes := chaosreport.Pick(3, 5)
	rounds := chaosreport.Pick(2, 15) // of each bad kind
	goods, err := scenario.Storm(source, "dl", clusters, nodes, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The template of the bad messages: a node event whose message
	// carries the marker (event.New would accept it: it is plain text).
	ref := event.ClusterRef{Namespace: "dl", Name: "hc-0"}
	tplEvent, err := event.New(source, &ref, event.ObjectRef{Kind: "Node", Name: "hc-0-np-bad", UID: "uid-bad", Hosted: true},
		event.NodeReadiness{Node: "hc-0-np-bad", Ready: event.ConditionFalse, Reason: "KubeletNotReady", Message: "secret-ish " + dlMarker,
			LastTransitionTime: time.Now()}, "bad", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := event.Encode(tplEvent)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := event.Subject(tplEvent)
	if err != nil {
		t.Fatal(err)
	}
	kinds := dlBadKinds()
	var bads []dlBadKind
	for range rounds {
		bads = append(bads, kinds...)
	}
	for _, k := range kinds {
		data := k.data(t, tpl)
		if !strings.Contains(string(data), dlMarker) {
			t.Fatalf("bad kind %s carries no marker", k.name)
		}
		if k.name == "oversized" && len(data) <= event.MaxSize {
			t.Fatalf("oversized message is %d bytes, not over %d", len(data), event.MaxSize)
		}
	}

	// Spread the bad messages evenly among the good ones; after each run
	// of bad ones, wait until the good event behind them is applied.
	badAt := map[int][]dlBadKind{} // good index → bad ones published before it
	for i, k := range bads {
		at := (i + 1) * len(goods) / (len(bads) + 1)
		badAt[at] = append(badAt[at], k)
	}
	wantReasons := map[string]float64{}
	stalls := 0
	var maxWait time.Duration
	for i, e := range goods {
		for _, k := range badAt[i] {
			if _, err := js.Publish(ctx, subject, k.data(t, tpl)); err != nil {
				t.Fatalf("publish %s: %v", k.name, err)
			}
			wantReasons[k.reason]++
		}
		data, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		subj, err := event.Subject(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subj, data, jetstream.WithMsgID(e.ID)); err != nil {
			t.Fatal(err)
		}
		if len(badAt[i]) > 0 {
			start := time.Now()
			if !dlWaitUntil(30*time.Second, func() bool { return dlMetricSum(t, reg, "hcpbot_bot_events_consumed_total") >= float64(i+1) }) {
				stalls++
				t.Errorf("consumer stalled: good event %d not applied within 30s of %d bad ones", i, len(badAt[i]))
			}
			maxWait = max(maxWait, time.Since(start))
		}
	}
	if !dlWaitUntil(60*time.Second, func() bool {
		return dlMetricSum(t, reg, "hcpbot_bot_events_consumed_total") >= float64(len(goods)) &&
			dlMetricSum(t, reg, "hcpbot_bot_events_dead_lettered_total") >= float64(len(bads))
	}) {
		stalls++
		t.Errorf("not every event was handled within 60s")
	}

	// Every message reached the stream (the oversized one too).
	info, err := js.Stream(ctx, event.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.CachedInfo().State.Msgs, uint64(len(goods)+len(bads)); got != want {
		t.Errorf("stream holds %d messages, want %d", got, want)
	}
	applied := dlMetricSum(t, reg, "hcpbot_bot_events_consumed_total")
	if applied != float64(len(goods)) {
		t.Errorf("applied %v events, want the %d good ones", applied, len(goods))
	}
	gotReasons := dlMetricByLabel(t, reg, "hcpbot_bot_events_dead_lettered_total", "reason")
	for reason, want := range wantReasons {
		if gotReasons[reason] != want {
			t.Errorf("dead-lettered %v as %s, want %v", gotReasons[reason], reason, want)
		}
	}
	for reason, got := range gotReasons {
		if _, ok := wantReasons[reason]; !ok {
			t.Errorf("dead-lettered %v as unexpected reason %s", got, reason)
		}
	}

	// The incidents are those of the good events alone: every cluster of
	// the storm, diagnosed as the proxy tunnel.
	dlEventually(t, 30*time.Second, "every cluster's incident", func() bool {
		return len(b.Incidents()) == clusters
	})
	for i := range clusters {
		k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: "dl", Name: fmt.Sprintf("hc-%d", i)}}
		diags, ok := b.Diagnose(k)
		if !ok || len(diags) == 0 || diags[0].Rule != diagnose.RuleProxyTunnel {
			t.Errorf("cluster %s: diagnoses %+v (known %v), want %s first", k, diags, ok, diagnose.RuleProxyTunnel)
		}
	}
	for _, inc := range b.Incidents() {
		if !inc.Open() || inc.Cluster.Source != source || inc.Cluster.Cluster.Namespace != "dl" {
			t.Errorf("unexpected incident %s of %s (open %v)", inc.Key, inc.Cluster, inc.Open())
		}
		for _, d := range inc.Diagnoses {
			for _, ev := range d.Evidence {
				if strings.Contains(ev.Object+ev.Text, "np-bad") || strings.Contains(ev.Text, dlMarker) {
					t.Errorf("incident %s cites a bad event: %+v", inc.Key, ev)
				}
			}
		}
	}
	// Wait for the notifications so that the Slack side is searched too.
	rec.WaitFor(t, chaosreport.Pick(60*time.Second, 240*time.Second), func(r *slackrec.Recorder) bool { return len(roots(r)) >= clusters })

	logText := logs.String()
	leaked := 0
	for line := range strings.SplitSeq(logText, "\n") {
		if strings.Contains(line, dlMarker) {
			leaked++
			if leaked <= 5 {
				t.Errorf("log line carries a bad message's content: %.400s", line)
			}
		}
	}
	dlLines := strings.Count(logText, `"event dead-lettered"`)
	if dlLines != len(bads) {
		t.Errorf("%d dead-letter log lines, want one per bad message (%d)", dlLines, len(bads))
	}
	slackLeaks := 0
	for _, m := range rec.Messages(channel) {
		if strings.Contains(m.Text+string(m.Blocks), dlMarker) {
			slackLeaks++
		}
	}
	if slackLeaks > 0 {
		t.Errorf("%d Slack messages carry a bad message's content", slackLeaks)
	}
	// Which kinds would leak: the decode error may quote the content (Go's
	// JSON and time errors do); the bot logs event.Describe of it, which
	// must not.
	var leaking []string
	for _, k := range kinds {
		if _, _, err := event.DecodeAll(k.data(t, tpl)); err != nil && strings.Contains(event.Describe(err), dlMarker) {
			leaking = append(leaking, k.name)
		}
	}
	if len(leaking) > 0 {
		t.Errorf("the dead-letter description of %v quotes the message's content (event.Describe)", leaking)
	}
	byReason := map[string]any{}
	for r, v := range gotReasons {
		byReason[r] = v
	}
	chaosreport.Log(t, "dead-letters", map[string]any{
		"good_sent": len(goods), "good_applied": applied, "bad_sent": len(bads), "bad_kinds": len(kinds),
		"dead_lettered_by_reason": byReason, "consumer_stalls": stalls, "max_wait_behind_bad_s": maxWait,
		"log_lines_with_marker": leaked, "leaking_kinds": leaking, "slack_messages_with_marker": slackLeaks, "incidents": len(b.Incidents()),
	})
}

// dlWaitUntil polls cond until it holds or timeout passes.
func dlWaitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dlEventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !dlWaitUntil(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// dlMetricSum sums a counter over its labels.
func dlMetricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	var total float64
	for _, v := range dlMetricByLabel(t, reg, name, "") {
		total += v
	}
	return total
}

// dlMetricByLabel returns a counter's values by the value of label ("" keys
// every series by "").
func dlMetricByLabel(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					key = lp.GetValue()
				}
			}
			out[key] += m.GetCounter().GetValue()
		}
	}
	return out
}

func dlTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
