//go:build unix

package kubeconfig_test

import (
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/kubeconfig"
	"github.com/hcpbot/hcpbot/kubeconfig/kubeconfigtest"
)

// returnWithin bounds calls that would block on a FIFO if they opened it.
const returnWithin = 10 * time.Second

// An exec plugin is never run. The control shows the plugin is real:
// clientcmd's ClientConfig runs it on the first request.
func TestRESTConfigDoesNotRunExecPlugin(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	ca := certPEM(srv)

	t.Run("control: clientcmd runs it", func(t *testing.T) {
		data, marker := kubeconfigtest.ExecPlugin(t, srv.URL, ca)
		cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("the control plugin did not run: %v", err)
		}
	})

	data, marker := kubeconfigtest.ExecPlugin(t, srv.URL, ca)
	cfg, err := kubeconfig.RESTConfig(data)
	if !errors.Is(err, kubeconfig.ErrRefused) {
		t.Fatalf("RESTConfig = %v, %v; want ErrRefused", cfg, err)
	}
	kubeconfigtest.NotRun(t, marker)
}

// A tokenFile is never opened: it is a FIFO, which a reader would block
// on, and which has no reader after the call. The control shows the probe
// sees a reader: clientcmd's ClientConfig opens the token file at once.
func TestRESTConfigDoesNotOpenTokenFile(t *testing.T) {
	t.Run("control: clientcmd opens it", func(t *testing.T) {
		data, fifo := kubeconfigtest.TokenFIFO(t, "https://127.0.0.1:6443", nil)
		done := make(chan error, 1)
		go func() {
			_, err := clientcmd.RESTConfigFromKubeConfig(data)
			done <- err
		}()
		deadline := time.Now().Add(returnWithin)
		for {
			open, err := kubeconfigtest.HasReader(fifo)
			if err != nil {
				t.Fatal(err)
			}
			if open {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("clientcmd never opened the FIFO: the probe would prove nothing")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Let the control finish: write a token and close.
		fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = syscall.Write(fd, []byte("token\n"))
		_ = syscall.Close(fd)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	data, fifo := kubeconfigtest.TokenFIFO(t, "https://127.0.0.1:6443", nil)
	_, err := kubeconfigtest.Promptly(t, returnWithin, "RESTConfig", func() (*rest.Config, error) { return kubeconfig.RESTConfig(data) })
	if !errors.Is(err, kubeconfig.ErrRefused) {
		t.Fatalf("RESTConfig: %v, want ErrRefused", err)
	}
	kubeconfigtest.NotOpened(t, fifo)
}

func certPEM(srv *httptest.Server) []byte {
	return pemCert(srv.Certificate().Raw)
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
