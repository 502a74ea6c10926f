// Package testcert makes throw-away self-signed CA certificates for tests
// (a proxy's trusted CA bundle): the PEM of the certificate only; the key
// is dropped and nothing is written, so no key material ever lands in the
// repository.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// CA returns a self-signed CA certificate for subject, PEM-encoded, valid
// from an hour ago until now+validFor (negative: expired already), and
// its NotAfter (UTC, whole seconds: as x509 stores it).
func CA(tb testing.TB, subject pkix.Name, validFor time.Duration) (pemText string, notAfter time.Time) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	notAfter = now.Add(validFor).UTC().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: subject,
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), notAfter
}
