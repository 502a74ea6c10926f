package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// run executes one command line in-process and returns exit code and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	code = c.main(context.Background(), args)
	return code, out.String(), errOut.String()
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "hcpbot ") {
		t.Fatalf("version: code %d, out %q", code, out)
	}
	code, out, _ = run(t, "--help")
	if code != 0 || !strings.Contains(out, "version") {
		t.Fatalf("--help: code %d, out %q", code, out)
	}
	code, _, errOut := run(t, "no-such-command")
	if code != 2 || !strings.Contains(errOut, `unknown command "no-such-command"`) {
		t.Fatalf("unknown: code %d, err %q", code, errOut)
	}
	code, _, errOut = run(t, "version", "--bogus")
	if code != 2 || !strings.Contains(errOut, "flag provided but not defined") {
		t.Fatalf("bad flag: code %d, err %q", code, errOut)
	}
}
