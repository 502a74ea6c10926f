//go:build unix

// Package kubeconfigtest builds hostile kubeconfigs whose effect is
// observable, for tests that show a reader neither runs nor opens
// anything: an exec plugin that creates a marker file, and a tokenFile
// that is a named pipe (opening a FIFO for reading blocks until a writer
// comes, and a reader holding it open is visible to a non-blocking writer).
package kubeconfigtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// single returns a kubeconfig of one context "hostile" for server with the
// given user.
func single(t testing.TB, server string, ca []byte, user *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = user
	cfg.Contexts["hostile"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "admin"}
	cfg.CurrentContext = "hostile"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ExecPlugin returns a kubeconfig whose user "admin" runs a shell script
// that creates the file marker (in t.TempDir(), not there yet) and prints
// a valid ExecCredential, so that a reader honouring exec would both leave
// the marker and get a token.
func ExecPlugin(t testing.TB, server string, ca []byte) (data []byte, marker string) {
	t.Helper()
	dir := t.TempDir()
	marker = filepath.Join(dir, "exec-ran")
	script := filepath.Join(dir, "plugin.sh")
	body := fmt.Sprintf("#!/bin/sh\ntouch '%s'\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"from-exec\"}}'\n", marker)
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return single(t, server, ca, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		Command: script, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}), marker
}

// TokenFIFO returns a kubeconfig whose user "admin" reads its token from
// fifo, a named pipe in t.TempDir().
func TokenFIFO(t testing.TB, server string, ca []byte) (data []byte, fifo string) {
	t.Helper()
	fifo = filepath.Join(t.TempDir(), "token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return single(t, server, ca, &clientcmdapi.AuthInfo{TokenFile: fifo}), fifo
}

// NotRun fails t if marker exists.
func NotRun(t testing.TB, marker string) {
	t.Helper()
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the exec plugin ran: %s exists (stat: %v)", marker, err)
	}
}

// HasReader reports whether some process holds fifo open for reading (or
// is blocked opening it): a non-blocking open for writing fails with ENXIO
// only when there is no reader.
func HasReader(fifo string) (bool, error) {
	fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ENXIO) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_ = syscall.Close(fd)
	return true, nil
}

// NotOpened fails t if fifo has a reader.
func NotOpened(t testing.TB, fifo string) {
	t.Helper()
	open, err := HasReader(fifo)
	if err != nil {
		t.Fatalf("probe %s: %v", fifo, err)
	}
	if open {
		t.Errorf("the tokenFile %s was opened for reading", fifo)
	}
}

// Promptly runs fn in a goroutine and fails t if it does not return within
// d: a reader blocked on a FIFO would never return.
func Promptly[T any](t testing.TB, d time.Duration, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		t.Fatalf("%s did not return within %v: it blocks (on opening the FIFO?)", what, d)
		var zero T
		return zero, nil
	}
}
