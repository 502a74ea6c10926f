// Package controlplane runs real Kubernetes control planes for tests and the
// demo: one etcd and any number of kube-apiservers on loopback, each API
// server with its own etcd prefix. The first is the "management" cluster;
// the others play HyperShift hosted clusters, reached like the real thing
// through admin kubeconfigs.
//
// The binaries come from Assets (built from module source, cached per user).
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceCIDR is the service network every API server here allocates from;
// the `kubernetes` Service gets 172.31.0.1, as in a default hosted cluster.
const ServiceCIDR = "172.31.0.0/16"

// Options configures Start.
type Options struct {
	// Dir holds data, certificates and logs; required.
	Dir string
	// AssetsDir holds etcd and kube-apiserver; empty means Assets().
	AssetsDir string
	// Progress receives build progress when the binaries must be built.
	Progress *os.File
	// StartTimeout bounds each process's start-up; default 60s.
	StartTimeout time.Duration
	// AuditLog: the management API server writes an audit log (AuditPolicy:
	// the writes of HostedClusters, Proxies and Services, at Metadata
	// level) to its AuditLogPath; read it with AuditEvents.
	AuditLog bool
}

// ControlPlane is one etcd and the API servers that share it.
type ControlPlane struct {
	opts    Options
	etcd    *process
	etcdURL string

	mu      sync.Mutex
	servers map[string]*APIServer
	// Management is the first API server, started by Start.
	Management *APIServer
}

// Start launches etcd and the management API server and waits until both
// are healthy. Call Stop to end them.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Dir == "" {
		return nil, errors.New("controlplane: Options.Dir is required")
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.AssetsDir == "" {
		dir, err := Assets(ctx, opts.Progress)
		if err != nil {
			return nil, err
		}
		opts.AssetsDir = dir
	}
	cp := &ControlPlane{opts: opts, servers: map[string]*APIServer{}}
	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	mgmt, err := cp.addAPIServer(ctx, "management", "management", opts.AuditLog)
	if err != nil {
		cp.Stop()
		return nil, err
	}
	cp.Management = mgmt
	return cp, nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(cp.opts.Dir, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cp.etcdURL = "http://127.0.0.1:" + itoa(clientPort)
	peerURL := "http://127.0.0.1:" + itoa(peerPort)
	cp.etcd = &process{
		name: "etcd",
		path: filepath.Join(cp.opts.AssetsDir, "etcd"),
		args: []string{
			"--name=testenv",
			"--data-dir=" + filepath.Join(dir, "data"),
			"--listen-client-urls=" + cp.etcdURL,
			"--advertise-client-urls=" + cp.etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=testenv=" + peerURL,
			// Test data is disposable; fsync only costs time.
			"--unsafe-no-fsync",
			"--log-level=warn",
		},
		logPath: filepath.Join(cp.opts.Dir, "etcd.log"),
	}
	if err := cp.etcd.start(); err != nil {
		return err
	}
	if err := waitHealthy(ctx, cp.etcd, cp.etcdURL+"/health", nil, nil, cp.opts.StartTimeout); err != nil {
		cp.etcd.stop(5 * time.Second)
		return err
	}
	return nil
}

// AddAPIServer starts another kube-apiserver, with its own etcd prefix,
// certificates and admin token: a separate cluster as far as clients can tell.
func (cp *ControlPlane) AddAPIServer(ctx context.Context, name string) (*APIServer, error) {
	return cp.addAPIServer(ctx, name, name, false)
}

// AddTwin starts a second API server of an existing cluster (same etcd
// prefix): it lets a test change that cluster while its first API server is
// down, as a highly available control plane would.
func (cp *ControlPlane) AddTwin(ctx context.Context, of *APIServer) (*APIServer, error) {
	return cp.addAPIServer(ctx, of.Name+"-twin", of.prefix, false)
}

func (cp *ControlPlane) addAPIServer(ctx context.Context, name, prefix string, audit bool) (*APIServer, error) {
	cp.mu.Lock()
	if _, ok := cp.servers[name]; ok {
		cp.mu.Unlock()
		return nil, fmt.Errorf("controlplane: API server %q exists", name)
	}
	cp.servers[name] = nil // reserve the name
	cp.mu.Unlock()

	s, err := cp.newAPIServer(name, prefix, audit)
	if err == nil {
		err = s.Start(ctx)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err != nil {
		delete(cp.servers, name)
		return nil, err
	}
	cp.servers[name] = s
	return s, nil
}

// RemoveAPIServer stops an API server added with AddAPIServer.
func (cp *ControlPlane) RemoveAPIServer(name string) {
	cp.mu.Lock()
	s := cp.servers[name]
	delete(cp.servers, name)
	cp.mu.Unlock()
	if s != nil {
		s.Stop()
	}
}

// Stop ends every API server, then etcd.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	servers := cp.servers
	cp.servers = map[string]*APIServer{}
	cp.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range servers {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
	if cp.etcd != nil {
		cp.etcd.stop(5 * time.Second)
	}
}

// APIServer is one kube-apiserver process. Stop and Start restart it on the
// same port with the same credentials, so clients reconnect on their own.
type APIServer struct {
	Name string
	// URL is https://127.0.0.1:<port>.
	URL string

	prefix    string
	pki       *pki
	proc      *process
	timeout   time.Duration
	auditPath string
}

func (cp *ControlPlane) newAPIServer(name, prefix string, audit bool) (*APIServer, error) {
	dir := filepath.Join(cp.opts.Dir, "apiserver-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	p, err := newPKI(dir, token)
	if err != nil {
		return nil, fmt.Errorf("certificates for %s: %w", name, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--etcd-servers=" + cp.etcdURL,
		"--etcd-prefix=/" + prefix,
		"--cert-dir=" + dir,
		"--tls-cert-file=" + p.certFile,
		"--tls-private-key-file=" + p.keyFile,
		"--secure-port=" + itoa(port),
		"--bind-address=127.0.0.1",
		// Otherwise the `kubernetes` Endpoints would carry the host's own
		// interface address, which nothing here should ever dial; the
		// reconciler refuses loopback, and no client here needs the Endpoints.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--service-account-key-file=" + p.saPubFile,
		"--service-account-signing-key-file=" + p.saKeyFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--token-auth-file=" + p.tokenFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + ServiceCIDR,
		// No controller-manager runs here to create `default` ServiceAccounts,
		// and the tests write pods directly.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=0",
	}
	var auditPath string
	if audit {
		auditArgs, path, err := auditLog(dir)
		if err != nil {
			return nil, fmt.Errorf("audit log of %s: %w", name, err)
		}
		args, auditPath = append(args, auditArgs...), path
	}
	return &APIServer{
		Name:      name,
		prefix:    prefix,
		URL:       "https://127.0.0.1:" + itoa(port),
		pki:       p,
		auditPath: auditPath,
		proc: &process{
			name:    "kube-apiserver " + name,
			path:    filepath.Join(cp.opts.AssetsDir, "kube-apiserver"),
			args:    args,
			logPath: filepath.Join(cp.opts.Dir, "kube-apiserver-"+name+".log"),
		},
		timeout: cp.opts.StartTimeout,
	}, nil
}

// Start (re)starts the process and waits for /readyz.
func (s *APIServer) Start(ctx context.Context) error {
	if err := s.proc.start(); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.pki.caPEM)
	hdr := http.Header{"Authorization": {"Bearer " + s.pki.adminToken}}
	if err := waitHealthy(ctx, s.proc, s.URL+"/readyz", hdr, &tls.Config{RootCAs: pool}, s.timeout); err != nil {
		s.proc.stop(5 * time.Second)
		return err
	}
	return nil
}

// Stop ends the process; Start brings it back on the same port.
func (s *APIServer) Stop() { s.proc.stop(10 * time.Second) }

// LogPath is where the process writes its log.
func (s *APIServer) LogPath() string { return s.proc.logPath }

// AuditLogPath is where the API server writes its audit log (JSON lines of
// audit.k8s.io/v1 Events), or "" when it writes none (Options.AuditLog).
func (s *APIServer) AuditLogPath() string { return s.auditPath }

// RESTConfig returns an admin client configuration (system:masters).
func (s *APIServer) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     s.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.pki.caPEM},
		// Tests create many objects quickly; client-side throttling only
		// slows them down against a private API server.
		QPS:   200,
		Burst: 400,
	}
}

// Kubeconfig returns an admin kubeconfig, the shape HyperShift stores in a
// HostedCluster's admin-kubeconfig Secret under the key `kubeconfig`.
func (s *APIServer) Kubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[s.Name] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: s.pki.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: s.pki.adminToken}
	cfg.Contexts[s.Name] = &clientcmdapi.Context{Cluster: s.Name, AuthInfo: "admin"}
	cfg.CurrentContext = s.Name
	return clientcmd.Write(*cfg)
}

// WriteKubeconfig writes Kubeconfig to path (mode 0600).
func (s *APIServer) WriteKubeconfig(path string) error {
	data, err := s.Kubeconfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Clients returns typed and dynamic admin clients.
func (s *APIServer) Clients() (kubernetes.Interface, dynamic.Interface, error) {
	cfg := s.RESTConfig()
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return kc, dc, nil
}
