package kubeconfig_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hcpbot/hcpbot/kubeconfig"
)

// pki is a CA with a client certificate and a server certificate for
// 127.0.0.1, PEM encoded.
type pki struct {
	ca, clientCert, clientKey []byte
	server                    tls.Certificate
	pool                      *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	caKey := mustKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, tmpl *x509.Certificate) ([]byte, []byte) {
		key := mustKey(t)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	p := &pki{ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.clientCert, p.clientKey = leaf(2, &x509.Certificate{Subject: pkix.Name{CommonName: "system:admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature})
	srvCert, srvKey := leaf(3, &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"kube-apiserver"}})
	p.server, err = tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// hypershiftKubeconfig is shaped like the admin kubeconfig HyperShift
// writes: cluster "cluster" with the server and inline CA, user "admin"
// with an inline client certificate and key, context "admin" (namespace
// default) current.
func hypershiftKubeconfig(t *testing.T, server string, p *pki) []byte {
	t.Helper()
	cfg := clientcmdapi.Config{Kind: "Config", APIVersion: "v1",
		Clusters:       map[string]*clientcmdapi.Cluster{"cluster": {Server: server, CertificateAuthorityData: p.ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {ClientCertificateData: p.clientCert, ClientKeyData: p.clientKey}},
		Contexts:       map[string]*clientcmdapi.Context{"admin": {Cluster: "cluster", AuthInfo: "admin", Namespace: "default"}},
		CurrentContext: "admin",
	}
	data, err := clientcmd.Write(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRESTConfigHyperShiftAdminKubeconfig(t *testing.T) {
	p := newPKI(t)
	cfg, err := kubeconfig.RESTConfig(hypershiftKubeconfig(t, "https://api.example.hypershift.local:6443", p))
	if err != nil {
		t.Fatal(err)
	}
	want := &rest.Config{Host: "https://api.example.hypershift.local:6443",
		TLSClientConfig: rest.TLSClientConfig{CAData: p.ca, CertData: p.clientCert, KeyData: p.clientKey}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("rest.Config:\n got %#v\nwant %#v", cfg, want)
	}
}

func TestRESTConfigTokenAndServerName(t *testing.T) {
	p := newPKI(t)
	data := []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443/prefix
    tls-server-name: kube-apiserver
    certificate-authority-data: ` + b64(p.ca) + `
users:
- name: u
  user:
    token: sha256~inline
contexts:
- name: x
  context: {cluster: c, user: u, namespace: default}
current-context: x
preferences: {}
`)
	cfg, err := kubeconfig.RESTConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	want := &rest.Config{Host: "https://10.0.0.1:6443/prefix", BearerToken: "sha256~inline",
		TLSClientConfig: rest.TLSClientConfig{CAData: p.ca, ServerName: "kube-apiserver"}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("rest.Config:\n got %#v\nwant %#v", cfg, want)
	}
}

// The built configuration works: mutual TLS against a loopback server
// that trusts only the kubeconfig's CA.
func TestRESTConfigConnectsWithClientCertificate(t *testing.T) {
	p := newPKI(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "system:admin" {
			http.Error(w, "no client certificate", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()
	cfg, err := kubeconfig.RESTConfig(hypershiftKubeconfig(t, srv.URL, p))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// truncated cuts a kubeconfig inside a flow mapping.
func truncated(data []byte) []byte {
	s := string(data)
	return []byte(s[:strings.Index(s, "{cluster")+5])
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// leak is in every hostile kubeconfig (as a token, a password, a path, an
// unknown field): no reason may carry it.
const leak = "LEAKCHECK"

// doc is a kubeconfig of cluster "c", user "u" and context "x" (current)
// with the given extra cluster and user lines (indented by four spaces);
// the user has an inline token unless userLines say otherwise.
func doc(p *pki, clusterLines, userLines string) []byte {
	if userLines == "" {
		userLines = "    token: sha256~" + leak + "\n"
	}
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    certificate-authority-data: ` + b64(p.ca) + "\n" + clusterLines + `users:
- name: u
  user:
` + userLines + `contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`)
}

const server = "    server: https://127.0.0.1:6443\n"

func TestRESTConfigRefusesHostileShapes(t *testing.T) {
	p := newPKI(t)
	cert, key := "    client-certificate-data: "+b64(p.clientCert)+"\n", "    client-key-data: "+b64(p.clientKey)+"\n"
	otherCert, otherKey := newPKI(t), "    client-key-data: "+b64(newPKI(t).clientKey)+"\n"
	token := "    token: sha256~" + leak + "\n"
	for _, tc := range []struct {
		name string
		data []byte
		err  error
		want string // in the reason
	}{
		{"exec", doc(p, server, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, 'touch /tmp/"+leak+"']\n"),
			kubeconfig.ErrRefused, `user "u" uses an exec plugin (exec); hcpbot runs no programs and accepts inline credentials only`},
		{"exec beside a token", doc(p, server, token+"    exec: {apiVersion: client.authentication.k8s.io/v1, command: "+leak+"}\n"),
			kubeconfig.ErrRefused, `user "u" uses an exec plugin (exec)`},
		{"auth-provider", doc(p, server, "    auth-provider:\n      name: oidc\n      config: {id-token: "+leak+", idp-issuer-url: https://idp.example}\n"),
			kubeconfig.ErrRefused, `user "u" uses an auth-provider plugin (auth-provider); hcpbot accepts inline credentials only`},
		{"tokenFile", doc(p, server, "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/"+leak+"\n"),
			kubeconfig.ErrRefused, `user "u" reads its token from a file (tokenFile); hcpbot opens no files`},
		{"tokenFile beside a token", doc(p, server, token+"    tokenFile: /etc/"+leak+"\n"),
			kubeconfig.ErrRefused, `(tokenFile)`},
		{"client-certificate path", doc(p, server, "    client-certificate: /etc/"+leak+".crt\n"+key),
			kubeconfig.ErrRefused, `user "u" reads its client certificate from a file (client-certificate)`},
		{"client-key path", doc(p, server, cert+"    client-key: /etc/"+leak+".key\n"),
			kubeconfig.ErrRefused, `user "u" reads its client key from a file (client-key)`},
		{"certificate-authority path", doc(p, server+"    certificate-authority: /etc/"+leak+"/ca.crt\n", ""),
			kubeconfig.ErrRefused, `cluster "c" reads its CA from a file (certificate-authority)`},
		{"insecure-skip-tls-verify", []byte(strings.Replace(string(doc(p, server+"    insecure-skip-tls-verify: true\n", "")), "    certificate-authority-data: "+b64(p.ca)+"\n", "", 1)),
			kubeconfig.ErrRefused, `cluster "c" turns off TLS verification (insecure-skip-tls-verify)`},
		{"proxy-url", doc(p, server+"    proxy-url: http://user:"+leak+"@10.0.0.1:3128\n", ""),
			kubeconfig.ErrRefused, `cluster "c" sends its traffic through a proxy (proxy-url)`},
		{"basic auth", doc(p, server, "    username: admin\n    password: "+leak+"\n"),
			kubeconfig.ErrRefused, `user "u" uses basic authentication (username/password)`},
		{"password beside a token", doc(p, server, token+"    password: "+leak+"\n"),
			kubeconfig.ErrRefused, `(username/password)`},
		{"as", doc(p, server, token+"    as: system:admin\n"), kubeconfig.ErrRefused, `user "u" impersonates another user (as)`},
		{"as-uid", doc(p, server, token+"    as-uid: \"0\"\n"), kubeconfig.ErrRefused, `user "u" impersonates a uid (as-uid)`},
		{"as-groups", doc(p, server, token+"    as-groups: [system:masters]\n"), kubeconfig.ErrRefused, `user "u" impersonates groups (as-groups)`},
		{"as-user-extra", doc(p, server, token+"    as-user-extra: {scopes: [all]}\n"), kubeconfig.ErrRefused, `user "u" impersonates user extras (as-user-extra)`},
		{"http server", doc(p, "    server: http://127.0.0.1:8080\n", ""), kubeconfig.ErrRefused, `cluster "c": server uses scheme "http"; hcpbot accepts https:// only`},
		{"server without scheme", doc(p, "    server: 127.0.0.1:6443\n", ""), kubeconfig.ErrRefused, `cluster "c": server`},
		{"server with credentials", doc(p, "    server: https://admin:"+leak+"@127.0.0.1:6443\n", ""), kubeconfig.ErrRefused, `cluster "c": server URL carries credentials`},
		{"server with a query", doc(p, "    server: https://127.0.0.1:6443/?x="+leak+"\n", ""), kubeconfig.ErrRefused, `server URL has a query`},
		{"no server", doc(p, "", ""), kubeconfig.ErrRefused, `cluster "c" has no server`},
		{"CA data not PEM", []byte(strings.Replace(string(doc(p, server, "")), b64(p.ca), b64([]byte(leak)), 1)),
			kubeconfig.ErrRefused, `cluster "c": certificate-authority-data holds no PEM certificate`},
		{"certificate without key", doc(p, server, cert), kubeconfig.ErrRefused, `user "u" has one of client-certificate-data and client-key-data without the other`},
		{"certificate and key do not match", doc(p, server, "    client-certificate-data: "+b64(otherCert.clientCert)+"\n"+otherKey),
			kubeconfig.ErrRefused, `user "u": client-certificate-data and client-key-data are not a matching PEM certificate and key`},
		{"no credentials", doc(p, server, "    {}\n"), kubeconfig.ErrRefused, `user "u" has no inline credentials`},
		{"unknown field", doc(p, server, token+"    tokenCommand: "+leak+"\n"), kubeconfig.ErrRefused, `unknown or duplicate fields`},
		{"duplicate field", doc(p, server+"    server: https://10.9.9.9:6443\n", ""), kubeconfig.ErrRefused, `unknown or duplicate fields`},
		{"hostile user outside the current context", []byte(strings.Replace(string(doc(p, server, "")), "contexts:",
			"- name: other\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: "+leak+"}\ncontexts:", 1)),
			kubeconfig.ErrRefused, `user "other" uses an exec plugin`},
		{"missing current-context", []byte(strings.Replace(string(doc(p, server, "")), "current-context: x\n", "", 1)),
			kubeconfig.ErrRefused, `it has no current-context`},
		{"current-context names no context", []byte(strings.Replace(string(doc(p, server, "")), "current-context: x", "current-context: other", 1)),
			kubeconfig.ErrRefused, `current-context "other" names no context`},
		{"context names a missing cluster", []byte(strings.Replace(string(doc(p, server, "")), "{cluster: c,", "{cluster: d,", 1)),
			kubeconfig.ErrRefused, `context "x" names cluster "d", which is not defined`},
		{"context names a missing user", []byte(strings.Replace(string(doc(p, server, "")), "user: u}", "user: v}", 1)),
			kubeconfig.ErrRefused, `context "x" names user "v", which is not defined`},
		{"empty", nil, kubeconfig.ErrInvalid, `it is empty`},
		{"garbage", []byte("token: sha256~" + leak + "\n  [unclosed: {"), kubeconfig.ErrInvalid, `it does not decode as a kubeconfig`},
		{"binary", []byte("\x00\x01\x02" + leak + "\xff"), kubeconfig.ErrInvalid, `it does not decode`},
		{"another kind", []byte("apiVersion: v1\nkind: Secret\ndata: {token: " + leak + "}\n"), kubeconfig.ErrInvalid, `it does not decode`},
		{"truncated", truncated(doc(p, server, "")), kubeconfig.ErrInvalid, `it does not decode`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := kubeconfig.RESTConfig(tc.data)
			if cfg != nil || !errors.Is(err, tc.err) {
				t.Fatalf("RESTConfig = %v, %v; want %v", cfg, err, tc.err)
			}
			var ke *kubeconfig.Error
			if !errors.As(err, &ke) {
				t.Fatalf("%T is not a *kubeconfig.Error", err)
			}
			if !strings.Contains(ke.Reason, tc.want) {
				t.Errorf("reason %q, want it to contain %q", ke.Reason, tc.want)
			}
			if strings.Contains(err.Error(), leak) || strings.Contains(err.Error(), b64(p.ca)[:20]) {
				t.Errorf("the error quotes the kubeconfig: %v", err)
			}
		})
	}
}

// clientcmd.Load, which the package does not use, drops unknown fields
// silently; the strict decode is why "unknown field" is refused above.
func TestLoadIsNotStrict(t *testing.T) {
	p := newPKI(t)
	data := doc(p, server, "    token: x\n    tokenCommand: y\n")
	if _, err := clientcmd.Load(data); err != nil {
		t.Fatalf("clientcmd.Load: %v (now strict? then the note in doc.go is stale)", err)
	}
	if _, err := kubeconfig.Parse(data); !errors.Is(err, kubeconfig.ErrRefused) {
		t.Errorf("Parse = %v, want ErrRefused", err)
	}
}

func TestReasonBoundsNames(t *testing.T) {
	p := newPKI(t)
	long := strings.Repeat("n", 500)
	data := []byte(strings.ReplaceAll(string(doc(p, server, "    tokenFile: /x\n")), "name: u\n", "name: "+long+"\n"))
	data = []byte(strings.Replace(string(data), "user: u}", "user: "+long+"}", 1))
	_, err := kubeconfig.RESTConfig(data)
	var ke *kubeconfig.Error
	if !errors.As(err, &ke) {
		t.Fatalf("err = %v", err)
	}
	if len(ke.Reason) > 300 || !strings.Contains(ke.Reason, "…") {
		t.Errorf("reason not bounded (%d bytes): %q", len(ke.Reason), ke.Reason)
	}
}
