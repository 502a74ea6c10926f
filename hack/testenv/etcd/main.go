// Command etcd is the etcd server, built from module source for the test
// control plane (see hack/testenv/build.sh).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
