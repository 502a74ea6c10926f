package kubeconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/versioning"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
)

var (
	// ErrInvalid: the bytes are not a kubeconfig (they do not decode).
	ErrInvalid = errors.New("not a valid kubeconfig")
	// ErrRefused: the kubeconfig decodes but uses something hcpbot does
	// not accept (a plugin, a file, a proxy, ...) or lacks what it needs
	// (a current context, its cluster or user, inline credentials).
	ErrRefused = errors.New("kubeconfig refused")
)

// Error says why a kubeconfig is not used. Reason names the field and the
// context, user or cluster holding it; it never carries a value from the
// kubeconfig other than those names.
type Error struct {
	Err    error // ErrInvalid or ErrRefused
	Reason string
}

func (e *Error) Error() string { return e.Err.Error() + ": " + e.Reason }

func (e *Error) Unwrap() error { return e.Err }

func refused(format string, args ...any) error {
	return &Error{Err: ErrRefused, Reason: fmt.Sprintf(format, args...)}
}

// inlineOnly ends the reasons for credentials read or run from elsewhere.
const inlineOnly = "accepts inline credentials only"

// strictCodec decodes like clientcmd.Load (same scheme, same v1 types,
// same conversion to the internal types) but reports unknown and
// duplicate fields instead of dropping them.
var strictCodec = func() runtime.Codec {
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, clientcmdlatest.Scheme, clientcmdlatest.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	return versioning.NewDefaultingCodecForScheme(clientcmdlatest.Scheme, s, s,
		schema.GroupVersion{Version: clientcmdlatest.Version}, runtime.InternalGroupVersioner)
}()

// Parse decodes data strictly. Its errors never quote data.
func Parse(data []byte) (*clientcmdapi.Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &Error{Err: ErrInvalid, Reason: "it is empty"}
	}
	cfg := clientcmdapi.NewConfig()
	obj, _, err := strictCodec.Decode(data, &schema.GroupVersionKind{Version: clientcmdlatest.Version, Kind: "Config"}, cfg)
	if err != nil {
		if runtime.IsStrictDecodingError(err) {
			// The field names could be text of the Secret: not quoted.
			return nil, refused("it holds unknown or duplicate fields; hcpbot refuses what a kubeconfig does not define")
		}
		// The decoder's message can quote the input: replaced.
		return nil, &Error{Err: ErrInvalid, Reason: "it does not decode as a kubeconfig (YAML or JSON, apiVersion v1, kind Config)"}
	}
	out, ok := obj.(*clientcmdapi.Config)
	if !ok {
		return nil, &Error{Err: ErrInvalid, Reason: "it does not decode as a kubeconfig"}
	}
	return out, nil
}

// RESTConfig parses data and builds the configuration of its current
// context from inline data only; see the package documentation for what
// is accepted. A refusal is an *Error wrapping ErrRefused, a kubeconfig
// that does not decode one wrapping ErrInvalid.
func RESTConfig(data []byte) (*rest.Config, error) {
	cfg, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return build(cfg)
}

func build(cfg *clientcmdapi.Config) (*rest.Config, error) {
	// Every entry is checked, in a stable order, so the reason does not
	// depend on map order and nothing hostile sits unnoticed beside the
	// current context.
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		if err := checkCluster(name, cfg.Clusters[name]); err != nil {
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		if err := checkUser(name, cfg.AuthInfos[name]); err != nil {
			return nil, err
		}
	}
	if cfg.CurrentContext == "" {
		return nil, refused("it has no current-context")
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil {
		return nil, refused("current-context %s names no context", quote(cfg.CurrentContext))
	}
	cl := cfg.Clusters[kctx.Cluster]
	if kctx.Cluster == "" || cl == nil {
		return nil, refused("context %s names cluster %s, which is not defined", quote(cfg.CurrentContext), quote(kctx.Cluster))
	}
	ai := cfg.AuthInfos[kctx.AuthInfo]
	if kctx.AuthInfo == "" || ai == nil {
		return nil, refused("context %s names user %s, which is not defined", quote(cfg.CurrentContext), quote(kctx.AuthInfo))
	}
	// Built field by field: nothing here makes client-go read a file, run
	// a plugin or pick a proxy from the kubeconfig.
	return &rest.Config{
		Host:        cl.Server,
		BearerToken: ai.Token,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: cl.TLSServerName,
			CAData:     bytes.Clone(cl.CertificateAuthorityData),
			CertData:   bytes.Clone(ai.ClientCertificateData),
			KeyData:    bytes.Clone(ai.ClientKeyData),
		},
		DisableCompression: cl.DisableCompression,
	}, nil
}

func checkCluster(name string, cl *clientcmdapi.Cluster) error {
	q := quote(name)
	switch {
	case cl == nil:
		return refused("cluster %s is empty", q)
	case cl.CertificateAuthority != "":
		return refused("cluster %s reads its CA from a file (certificate-authority); hcpbot opens no files and accepts certificate-authority-data only", q)
	case cl.InsecureSkipTLSVerify:
		return refused("cluster %s turns off TLS verification (insecure-skip-tls-verify)", q)
	case cl.ProxyURL != "":
		return refused("cluster %s sends its traffic through a proxy (proxy-url); hcpbot does not take proxies from a kubeconfig", q)
	}
	if err := checkServer(q, cl.Server); err != nil {
		return err
	}
	if len(cl.CertificateAuthorityData) > 0 && !hasCertificate(cl.CertificateAuthorityData) {
		return refused("cluster %s: certificate-authority-data holds no PEM certificate", q)
	}
	return nil
}

func checkServer(q, server string) error {
	if server == "" {
		return refused("cluster %s has no server", q)
	}
	u, err := url.Parse(server)
	if err != nil {
		return refused("cluster %s: server is not a URL", q)
	}
	switch {
	case u.Scheme != "https":
		// url.Parse allows only [a-z0-9+.-] in a scheme: safe to show.
		return refused("cluster %s: server uses scheme %q; hcpbot accepts https:// only", q, bound(u.Scheme))
	case u.Host == "" || u.Hostname() == "":
		return refused("cluster %s: server has no host", q)
	case u.User != nil:
		return refused("cluster %s: server URL carries credentials", q)
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return refused("cluster %s: server URL has a query, fragment or opaque part", q)
	}
	return nil
}

func checkUser(name string, ai *clientcmdapi.AuthInfo) error {
	q := quote(name)
	switch {
	case ai == nil:
		return refused("user %s is empty", q)
	case ai.Exec != nil:
		return refused("user %s uses an exec plugin (exec); hcpbot runs no programs and %s", q, inlineOnly)
	case ai.AuthProvider != nil:
		return refused("user %s uses an auth-provider plugin (auth-provider); hcpbot %s", q, inlineOnly)
	case ai.TokenFile != "":
		return refused("user %s reads its token from a file (tokenFile); hcpbot opens no files and %s", q, inlineOnly)
	case ai.ClientCertificate != "":
		return refused("user %s reads its client certificate from a file (client-certificate); hcpbot opens no files and %s", q, inlineOnly)
	case ai.ClientKey != "":
		return refused("user %s reads its client key from a file (client-key); hcpbot opens no files and %s", q, inlineOnly)
	case ai.Username != "" || ai.Password != "":
		return refused("user %s uses basic authentication (username/password); hcpbot accepts a token or a client certificate only", q)
	case ai.Impersonate != "":
		return refused("user %s impersonates another user (as); hcpbot refuses impersonation", q)
	case ai.ImpersonateUID != "":
		return refused("user %s impersonates a uid (as-uid); hcpbot refuses impersonation", q)
	case len(ai.ImpersonateGroups) > 0:
		return refused("user %s impersonates groups (as-groups); hcpbot refuses impersonation", q)
	case len(ai.ImpersonateUserExtra) > 0:
		return refused("user %s impersonates user extras (as-user-extra); hcpbot refuses impersonation", q)
	}
	hasCert, hasKey := len(ai.ClientCertificateData) > 0, len(ai.ClientKeyData) > 0
	switch {
	case hasCert != hasKey:
		return refused("user %s has one of client-certificate-data and client-key-data without the other", q)
	case hasCert:
		// The error of X509KeyPair is not passed on: keep to our words.
		if _, err := tls.X509KeyPair(ai.ClientCertificateData, ai.ClientKeyData); err != nil {
			return refused("user %s: client-certificate-data and client-key-data are not a matching PEM certificate and key", q)
		}
	case ai.Token == "":
		return refused("user %s has no inline credentials (token, or client-certificate-data with client-key-data)", q)
	}
	return nil
}

// hasCertificate reports whether data holds at least one PEM certificate
// that parses.
func hasCertificate(data []byte) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err == nil {
			return true
		}
	}
}

// maxName bounds a name quoted in a reason.
const maxName = 63

// quote quotes a context, user or cluster name for a reason, bounded.
func quote(name string) string { return fmt.Sprintf("%q", bound(name)) }

func bound(s string) string {
	if len(s) <= maxName {
		return s
	}
	cut := maxName
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
