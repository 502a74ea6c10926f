//go:build nodemo

package main

import (
	"context"
	"errors"
)

// Release builds (-tags nodemo: the image, `make build`) leave the demo
// out: it brings up etcd and kube-apiserver built from this repository's
// module source (hack/testenv/build.sh), which only a checkout has. The
// command stays, to say so.
func init() {
	extraCommands = append(extraCommands, command{name: "demo", summary: demoSummary + " (not in this build)", run: runDemo})
}

// errNoDemo is what `hcpbot demo` answers in a release build.
var errNoDemo = errors.New("not in this build: the demo needs a source checkout (it builds etcd and kube-apiserver from the module source with hack/testenv/build.sh); in a checkout run `make demo`, or `go run ./cmd/hcpbot demo`")

func runDemo(context.Context, *cli, []string) error { return errNoDemo }
