// Package testcert makes throw-away self-signed CA certificates for tests
// (a proxy's trusted CA bundle): the PEM of the certificate only; the key
// is dropped and nothing is written, so no key material ever lands in the
// repository.
package testcert

import (
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/scenario"
)

// CA returns a self-signed CA certificate for subject, PEM-encoded, valid
// from an hour ago until now+validFor (negative: expired already), and
// its NotAfter (UTC, whole seconds: as x509 stores it).
func CA(tb testing.TB, subject pkix.Name, validFor time.Duration) (pemText string, notAfter time.Time) {
	tb.Helper()
	notAfter = time.Now().Add(validFor).UTC().Truncate(time.Second)
	pemData, err := scenario.CAPEM(subject, notAfter)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pemData), notAfter
}
