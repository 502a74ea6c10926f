//go:build !nodemo

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// `hcpbot demo --script` plays seed 000 end to end on its own control
// plane, through the product's path: the proposal is stored in the
// approval store, the proposer's own approval is refused (four-eyes),
// a second console user's approval is sent signed to the agent, which
// executes it as bob's Kubernetes identity (the API server's audit log
// and the Event say so), `/hcp audit` lists every step from the audit
// stream, and the incident resolves. It exits 0 only if all of that happened.
func TestDemoScript(t *testing.T) {
	env.Need(t)
	dir := t.TempDir()
	code, out, errOut := run(t, "demo", "--script", "--dir", dir)
	if code != 0 {
		t.Fatalf("demo --script exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m := regexp.MustCompile("proposes `(act-[a-z0-9]+)`").FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no proposal in the demo output:\n%s", out)
	}
	id := m[1]
	for _, want := range []string{
		"✔ diagnosed",
		"● NEW inc-",
		"[alice] hcp> /hcp fix noproxy clusters/proxied",
		"[alice] hcp> /hcp approve " + id,
		"Four-eyes rule: you proposed `" + id + "`",
		"[bob] hcp> /hcp approve " + id,
		"(requested by @alice) approved by @bob and applied", // mentions as Slack shows them
		// Written as bob (identities): the outcome, the API server's audit
		// log and the Event on the HostedCluster say so.
		"written as Kubernetes user",
		"✔ the API server's audit log: patch hostedclusters clusters/proxied by ",
		" as user bob (groups platform-ops",
		"✔ kubectl get events -n clusters: hcpbot action " + id,
		"written as Kubernetes user bob",
		"✔ incident", "resolved",
		"[alice] hcp> /hcp audit",
		// What /hcp audit read back from the audit stream.
		"proposed " + id + " on clusters/proxied by U0000ALICE",
		"refused " + id + " on clusters/proxied by U0000ALICE",
		"approved " + id + " on clusters/proxied by U00000BOB",
		"executed " + id + " on clusters/proxied by U00000BOB",
		"kubernetes",
		// The incident follows the fix to the end.
		"kube-apiserver-proxy direct 0 of 3", "✅ RESOLVED", "Time to heal", "Approved by: @bob", "Timeline of",
		// Buttons as the commands they run.
		"[Approve fix: /hcp approve inc-",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// The console is a terminal: no Slack escapes, no block placeholders,
	// no IDs for the people it knows, no code fences.
	for _, unwanted := range []string{"&gt;", "&lt;", "&amp;", "[actions block]", "<@U", "@U0000ALICE", "@U00000BOB", "```"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("demo output shows %q", unwanted)
		}
	}
	if strings.Contains(out, "panic") {
		t.Errorf("demo output mentions a panic:\n%s", out)
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
	// The agent ran it (approval.Serve logs what it executed, with the
	// people whose seals it verified), in the log the demo writes.
	logs, err := os.ReadFile(filepath.Join(dir, "hcpbot.log"))
	if err != nil {
		t.Fatal(err)
	}
	executed := false
	for line := range strings.SplitSeq(string(logs), "\n") {
		if strings.Contains(line, `"message":"action executed"`) && strings.Contains(line, `"action":"`+id+`"`) &&
			strings.Contains(line, `"requestedBy":"U0000ALICE"`) && strings.Contains(line, `"approvers":["U00000BOB"]`) {
			executed = true
		}
	}
	if !executed {
		t.Errorf("the agent's log has no execution of %s:\n%s", id, logs)
	}
	// On the embedded server, in-process, each as its own role: the
	// whole flow within the bot's and the agent's rights.
	if !strings.Contains(string(logs), "no listener, in-process connections only; authentication required") {
		t.Errorf("the demo's embedded NATS server does not say it has no listener:\n%s", logs)
	}
	if strings.Contains(string(logs), "Permissions Violation") {
		t.Errorf("the server refused the bot or the agent something:\n%s", logs)
	}
}
