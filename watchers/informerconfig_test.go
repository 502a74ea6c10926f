package watchers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// freeAddr returns a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// serve starts an HTTP server on addr, answering 200 "up".
func serve(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("up")) })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func waitClient(max time.Duration) *http.Client {
	return &http.Client{Transport: &serverWait{next: &http.Transport{}, poll: 20 * time.Millisecond, max: max}}
}

// countingTransport counts the round trips it passes on.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(req)
}

// TestServerWaitListsOnceServerIsBack: a GET refused at connect waits for
// the server, and succeeds once it listens; the informers' lists after an
// API server restart do so instead of backing off.
func TestServerWaitListsOnceServerIsBack(t *testing.T) {
	addr := freeAddr(t)
	tries := &countingTransport{next: &http.Transport{}}
	client := &http.Client{Transport: &serverWait{next: tries, poll: 20 * time.Millisecond, max: time.Minute}}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		resp, err := client.Get("http://" + addr + "/api/v1/nodes")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// Refused twice: the GET is waiting, not failed.
	deadline := time.Now().Add(30 * time.Second)
	for tries.n.Load() < 2 {
		select {
		case err := <-done:
			t.Fatalf("GET returned while the server was down: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET tried %d times in 30s, want a retry", tries.n.Load())
		}
	}
	serve(t, addr)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("GET after the server came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("GET did not return within 30s of the server listening")
	}
	t.Logf("GET answered %s after it was first refused", time.Since(start).Round(time.Millisecond))
}

// TestServerWaitBounds: writes are refused at once (never retried), the
// wait ends with the request's context and after max, with the refusal.
func TestServerWaitBounds(t *testing.T) {
	addr := freeAddr(t)
	refused := func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

	t0 := time.Now()
	_, err := waitClient(time.Minute).Post("http://"+addr+"/apis/x", "application/json", strings.NewReader("{}"))
	if !refused(err) || time.Since(t0) > 5*time.Second {
		t.Errorf("POST: %v after %s, want refused at once", err, time.Since(t0))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api", nil)
	t0 = time.Now()
	_, err = waitClient(time.Minute).Do(req)
	if err == nil || time.Since(t0) > 10*time.Second {
		t.Errorf("GET with a 300ms context: %v after %s, want an error soon after the context ended", err, time.Since(t0))
	}

	t0 = time.Now()
	_, err = waitClient(500 * time.Millisecond).Get("http://" + addr + "/api")
	if !refused(err) || time.Since(t0) < 500*time.Millisecond || time.Since(t0) > 10*time.Second {
		t.Errorf("GET with max 500ms: %v after %s, want refused after about 500ms", err, time.Since(t0))
	}
}
