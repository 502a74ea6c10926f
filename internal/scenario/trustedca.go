package scenario

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TrustedCAKey is the key of the trusted CA ConfigMap HyperShift reads.
const TrustedCAKey = "ca-bundle.crt"

// CAPEM returns a freshly generated self-signed CA certificate for
// subject, PEM encoded, valid from an hour before now (or before notAfter,
// when that is earlier) until notAfter. The key is thrown away: tests need
// the certificate's dates, never its trust, and no key material is ever
// written.
func CAPEM(subject pkix.Name, notAfter time.Time) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	notBefore := time.Now()
	if notAfter.Before(notBefore) {
		notBefore = notAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             notBefore.Add(-time.Hour),
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// SetTrustedCA creates or replaces the trusted CA ConfigMap namespace/name
// holding one CA certificate named cn, valid until notAfter.
func SetTrustedCA(ctx context.Context, kc kubernetes.Interface, namespace, name, cn string, notAfter time.Time) error {
	pemData, err := CAPEM(pkix.Name{CommonName: cn, Organization: []string{"Corp Example"}}, notAfter)
	if err != nil {
		return err
	}
	cms := kc.CoreV1().ConfigMaps(namespace)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string]string{TrustedCAKey: string(pemData)}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ConfigMap %s/%s: %w", namespace, name, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	cm.Data = map[string]string{TrustedCAKey: string(pemData)}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update ConfigMap %s/%s: %w", namespace, name, err)
	}
	return nil
}
