package bench

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// natsProc is one nats-server process of a cluster started by
// startNATSCluster.
type natsProc struct {
	name, url, store string
	cmd              *exec.Cmd
	log              *os.File
}

// startNATSCluster starts n real nats-server processes (the release of
// go.mod, natstest.ServerBinary) forming one JetStream cluster on
// loopback, with the JetStream settings of configs/deploy/nats/nats.conf
// (file store limits, sync_interval: always) and without its TLS and
// users, which need certificates and nkeys and do not change the load. It
// waits until JetStream answers through every server.
func startNATSCluster(b *testing.B, n int, extraConf ...string) []*natsProc {
	b.Helper()
	bin := natstest.ServerBinary(b)
	ports := make([]int, 2*n)
	var ls []net.Listener
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	dir := b.TempDir()
	procs := make([]*natsProc, n)
	b.Cleanup(func() { stopNATS(procs) })
	for i := range n {
		p := &natsProc{name: fmt.Sprintf("nats-%d", i), url: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			store: filepath.Join(dir, fmt.Sprintf("nats-%d", i), "jetstream")}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  max_file_store: 10G
  max_memory_store: 256M
  sync_interval: always
}
cluster {
  name: hcpbench
  listen: 127.0.0.1:%d
  routes: [%s]
  connect_retries: 120
}
`, p.name, ports[i], p.store, ports[n+i], strings.Join(routes, ", ")) + strings.Join(extraConf, "\n")
		cf := filepath.Join(dir, p.name+".conf")
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			b.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(dir, p.name+".log"))
		if err != nil {
			b.Fatal(err)
		}
		p.log = logf
		p.cmd = exec.Command(bin, "-c", cf)
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		if err := p.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		procs[i] = p
	}
	// JetStream answers once the meta group has a leader and all peers.
	deadline := time.Now().Add(time.Minute)
	for _, p := range procs {
		for {
			err := natsReady(p.url, n)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s not ready within a minute: %v", p.name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return procs
}

func natsReady(url string, peers int) error {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

func stopNATS(procs []*natsProc) {
	for _, p := range procs {
		if p != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		if p == nil || p.cmd.Process == nil {
			continue
		}
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		p.log.Close()
	}
}

// rss is the process's resident set size in bytes.
func (p *natsProc) rss() uint64 { return procRSS(strconv.Itoa(p.cmd.Process.Pid)) }

// disk is the size of the process's JetStream store in bytes.
func (p *natsProc) disk() uint64 {
	var n uint64
	_ = filepath.WalkDir(p.store, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += uint64(fi.Size())
			}
		}
		return nil
	})
	return n
}

// procRSS reads VmRSS of process pid ("self": this one) in bytes (Linux),
// 0 elsewhere.
func procRSS(pid string) uint64 {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
