//go:build unix

package actions_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/kubeconfig"
	"github.com/hcpbot/hcpbot/kubeconfig/kubeconfigtest"
)

// The hosted-cluster kubeconfig Secret is input the executor does not
// control: through the real API server, a Secret holding a plugin or a
// file reference is refused before any client exists; the exec plugin does
// not run and the tokenFile (a FIFO) is not opened.
func TestHostedRESTConfigRefusesUnsafeKubeconfigs(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	const server = "https://127.0.0.1:1"
	withUser := func(ai *clientcmdapi.AuthInfo) []byte {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
		cfg.AuthInfos["u"] = ai
		cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		cfg.CurrentContext = "x"
		data, err := clientcmd.Write(*cfg)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	execData, marker := kubeconfigtest.ExecPlugin(t, server, nil)
	fifoData, fifo := kubeconfigtest.TokenFIFO(t, server, nil)
	for _, tc := range []struct {
		name, reason string
		data         []byte
	}{
		{"exec", `user "admin" uses an exec plugin (exec)`, execData},
		{"token-file", `user "admin" reads its token from a file (tokenFile)`, fifoData},
		{"cert-file", `user "u" reads its client certificate from a file (client-certificate)`,
			withUser(&clientcmdapi.AuthInfo{ClientCertificate: "/etc/tls.crt", ClientKey: "/etc/tls.key"})},
		{"auth-provider", `user "u" uses an auth-provider plugin`, withUser(&clientcmdapi.AuthInfo{AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "oidc"}})},
		{"impersonation", `user "u" impersonates another user (as)`, withUser(&clientcmdapi.AuthInfo{Token: "t", Impersonate: "system:admin"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := seedCluster(t, scenario.Healthy(env.Namespace(t), "kc"))
			secret, err := env.Kube.CoreV1().Secrets(hc.Namespace).Get(ctx, hc.Status.Kubeconfig.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			secret.Data[hypershift.KubeconfigKey] = tc.data
			if _, err := env.Kube.CoreV1().Secrets(hc.Namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			_, err = kubeconfigtest.Promptly(t, 20*time.Second, "HostedRESTConfig", func() (*rest.Config, error) {
				return actions.HostedRESTConfig(ctx, env.Kube, hc)
			})
			if !errors.Is(err, actions.ErrKubeconfig) || !errors.Is(err, kubeconfig.ErrRefused) {
				t.Fatalf("HostedRESTConfig = %v, want ErrKubeconfig and kubeconfig.ErrRefused", err)
			}
			if !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), hc.Namespace+"/"+hc.Status.Kubeconfig.Name) {
				t.Errorf("error %q does not name the Secret and %q", err, tc.reason)
			}
			if _, err := kubeconfigtest.Promptly(t, 20*time.Second, "HostedClient", func() (kubernetes.Interface, error) {
				return actions.HostedClient(ctx, env.Kube, hc)
			}); !errors.Is(err, actions.ErrKubeconfig) {
				t.Errorf("HostedClient = %v, want ErrKubeconfig", err)
			}
		})
	}
	kubeconfigtest.NotRun(t, marker)
	kubeconfigtest.NotOpened(t, fifo)
}
