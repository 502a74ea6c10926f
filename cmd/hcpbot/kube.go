package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/hcpbot/hcpbot/internal/version"
	"github.com/hcpbot/hcpbot/redact"
)

// kubeCheckTimeout bounds agentKube's question to the API server: long
// enough for a busy server, short enough that a wrong kubeconfig shows as
// a failed start instead of a process that runs and watches nothing.
const kubeCheckTimeout = 15 * time.Second

// podServiceAccount is where the kubelet mounts a pod's service account
// (rest.InClusterConfig's tokenFile and rootCAFile, client-go
// rest/config.go:547-550).
const podServiceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// host is what the agent reads of the machine it runs on to find its
// cluster and its store: the environment (KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT, KUBECONFIG, HOME, XDG_CACHE_HOME) and the
// service account's folder. client-go reads os.Getenv and fixed paths
// (and HOME once, at init); here they come from the cli, so `config
// check` and start-up load the same way from the same host, and a test's
// host is the test's.
type host struct {
	getenv         func(string) string
	serviceAccount string
}

func (c *cli) host() host {
	h := host{getenv: c.getenv, serviceAccount: c.serviceAccount}
	if h.serviceAccount == "" {
		h.serviceAccount = podServiceAccount
	}
	return h
}

// agentKube builds the agent's client (agentKubeClient) and asks its API
// server for /version, so that a kubeconfig that does not load, or a
// server that refuses it (unreachable, bad certificate, bad credentials),
// stops the agent at once with the reason rather than leaving a process
// that looks ready and watches nothing. /version is readable by every
// authenticated user (system:public-info-viewer): it needs no grant.
func agentKube(ctx context.Context, h host, path string) (*rest.Config, error) {
	cfg, kube, from, err := agentKubeClient(h, path)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, kubeCheckTimeout)
	defer cancel()
	if err := kube.Discovery().RESTClient().Get().AbsPath("/version").Do(cctx).Error(); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: the management cluster's API server %s: GET /version: %w", from, redact.RedactURL(cfg.Host), err)
	}
	return cfg, nil
}

// agentKubeClient builds the agent's client as start-up does, dialling
// nothing: what `config check` runs without --online. from says where
// the configuration came from.
func agentKubeClient(h host, path string) (cfg *rest.Config, kube kubernetes.Interface, from string, err error) {
	cfg, from, err = kubeConfig(h, path)
	if err != nil {
		return nil, nil, "", err
	}
	cfg.UserAgent = "hcpbot-agent/" + version.Version
	// Builds the transport, which reads the files the configuration names
	// (certificate-authority, client-certificate, client-key).
	if kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig %s: %w", from, err)
	}
	return cfg, kube, from, nil
}

// kubeConfig loads path; empty, the pod's service account, else the
// kubeconfig loading rules (KUBECONFIG, else ~/.kube/config): client-go's
// rest.InClusterConfig then clientcmd's deferred loading, read from h.
func kubeConfig(h host, path string) (*rest.Config, string, error) {
	var notInPod error
	if path == "" {
		cfg, err := h.inCluster()
		if err == nil {
			return cfg, "in-cluster", nil
		}
		notInPod = err
	}
	rules, from := h.loadingRules(path)
	loaded, err := rules.Load()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*loaded, "", nil, rules).ClientConfig()
	switch {
	case err == nil:
		return cfg, from, nil
	case !clientcmd.IsEmptyConfig(err):
		return nil, "", fmt.Errorf("kubeconfig %s: %w", from, err)
	case path != "":
		// Deferred loading's last resort (client-go
		// tools/clientcmd/merged_client_builder.go:119-124): a file that
		// names no cluster, in a pod, means the pod's own.
		if cfg, ierr := h.inCluster(); ierr == nil {
			return cfg, "in-cluster", nil
		}
		return nil, "", fmt.Errorf("kubeconfig %s: %w", from, err)
	}
	found := "no kubeconfig at " + from
	if slices.ContainsFunc(rules.Precedence, func(f string) bool { _, err := os.Stat(f); return err == nil }) {
		found = from + " has no current context with a cluster"
	}
	return nil, "", fmt.Errorf("kubeconfig: none given, not in a pod (%v), and %s: give the management cluster's kubeconfig (agent.kubeconfig, --kubeconfig), or run the agent in a pod of that cluster", notInPod, found)
}

// inCluster is rest.InClusterConfig (client-go rest/config.go:546-577)
// reading h, with one difference: a service account CA that does not
// load fails here, where client-go logs it and goes on to fail every
// request with an unknown authority.
func (h host) inCluster() (*rest.Config, error) {
	addr, port := h.getenv("KUBERNETES_SERVICE_HOST"), h.getenv("KUBERNETES_SERVICE_PORT")
	if addr == "" || port == "" {
		return nil, rest.ErrNotInCluster
	}
	tokenFile := filepath.Join(h.serviceAccount, "token")
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("in-cluster: the service account token: %w", err)
	}
	caFile := filepath.Join(h.serviceAccount, "ca.crt")
	if _, err := certutil.NewPool(caFile); err != nil {
		return nil, fmt.Errorf("in-cluster: the service account CA: %w", err)
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(addr, port),
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		BearerToken:     string(token),
		BearerTokenFile: tokenFile,
	}, nil
}

// loadingRules are clientcmd.NewDefaultClientConfigLoadingRules (client-go
// tools/clientcmd/loader.go:160-180) reading h, and what they read, for
// messages. Two differences: without HOME there is no ~/.kube/config
// (client-go would read .kube/config in the working folder), and no
// migration of a 2015 ~/.kube/.kubeconfig, which copies files: loading
// writes nothing, so `config check` leaves the host as it found it.
func (h host) loadingRules(path string) (*clientcmd.ClientConfigLoadingRules, string) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	if path != "" {
		return rules, path
	}
	if env := h.getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		seen := map[string]bool{}
		for _, f := range filepath.SplitList(env) {
			if !seen[f] {
				seen[f] = true
				rules.Precedence = append(rules.Precedence, f)
			}
		}
		rules.WarnIfAllMissing = true
		return rules, "KUBECONFIG (" + strings.Join(rules.Precedence, ", ") + ")"
	}
	home := h.getenv("HOME")
	if home == "" {
		return rules, "~/.kube/config (HOME is not set)"
	}
	f := filepath.Join(home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
	rules.Precedence = []string{f}
	return rules, f
}
