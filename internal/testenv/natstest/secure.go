package natstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
)

// TLS file names in a directory written by WriteTLS: those of a
// kubernetes.io/tls Secret with its CA, as cert-manager writes them.
const (
	TLSCert = "tls.crt"
	TLSKey  = "tls.key"
	TLSCA   = "ca.crt"
)

// WriteTLS writes into dir a fresh CA (ca.crt) and a certificate for
// 127.0.0.1 and localhost signed by it (tls.crt, tls.key), usable by a
// server and, for mutual TLS between routes, as a client certificate.
func WriteTLS(tb testing.TB, dir string) {
	tb.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "natstest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "natstest"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		TLSCA:   {Type: "CERTIFICATE", Bytes: caDER},
		TLSCert: {Type: "CERTIFICATE", Bytes: der},
		TLSKey:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
}

// User is an nkey user: the file holding its seed (mode 0600, in a
// TempDir) and its public key, the one a server configuration names.
type User struct {
	SeedFile string
	Public   string
}

// NewUser creates an nkey user.
func NewUser(tb testing.TB) User {
	tb.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		tb.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		tb.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		tb.Fatal(err)
	}
	f := filepath.Join(tb.TempDir(), "nkey.seed")
	if err := os.WriteFile(f, seed, 0o600); err != nil {
		tb.Fatal(err)
	}
	return User{SeedFile: f, Public: pub}
}

// StartOptions starts a JetStream server from opts (already complete:
// listeners on loopback, store in a TempDir) and waits until it accepts
// clients; it is shut down when the test ends.
func StartOptions(tb testing.TB, opts *server.Options) *server.Server {
	tb.Helper()
	opts.NoSigs, opts.DisableJetStreamBanner = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("natstest: %v", err)
	}
	srv.SetLoggerV2(serverLog{Logger(tb)}, false, false, false)
	go srv.Start()
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for !srv.ReadyForConnections(50*time.Millisecond) || (opts.JetStream && !srv.JetStreamEnabled()) {
		if ctx.Err() != nil {
			tb.Fatalf("natstest: server not ready within %s", Timeout)
		}
	}
	return srv
}

// Secured is a server that requires TLS and knows one nkey user, with
// every permission: for tests of the client side of authentication.
type Secured struct {
	URL    string // tls://127.0.0.1:port
	CAFile string // verifies the server's certificate
	User   User
}

// RunSecured starts a JetStream server on loopback requiring TLS and the
// nkey user it returns.
func RunSecured(tb testing.TB) Secured {
	tb.Helper()
	dir := tb.TempDir()
	WriteTLS(tb, dir)
	u := NewUser(tb)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: filepath.Join(dir, TLSCert), KeyFile: filepath.Join(dir, TLSKey), CaFile: filepath.Join(dir, TLSCA),
	})
	if err != nil {
		tb.Fatal(err)
	}
	srv := StartOptions(tb, &server.Options{
		ServerName: "natstest-secured", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: tb.TempDir(),
		TLS: true, TLSConfig: tc, TLSTimeout: 5,
		Nkeys: []*server.NkeyUser{{Nkey: u.Public}},
	})
	return Secured{URL: "tls://" + srv.Addr().String(), CAFile: filepath.Join(dir, TLSCA), User: u}
}

// serverLog sends a server's warnings and errors to the test's logger.
type serverLog struct{ l zerolog.Logger }

func (s serverLog) Noticef(string, ...any)    {}
func (s serverLog) Debugf(string, ...any)     {}
func (s serverLog) Tracef(string, ...any)     {}
func (s serverLog) Warnf(f string, v ...any)  { s.l.Warn().Msgf("nats-server: "+f, v...) }
func (s serverLog) Errorf(f string, v ...any) { s.l.Error().Msgf("nats-server: "+f, v...) }
func (s serverLog) Fatalf(f string, v ...any) { s.l.Error().Msgf("nats-server fatal: "+f, v...) }

// Operator is a server in operator (JWT) mode that knows one account with
// JetStream and one user of it: for tests of .creds authentication.
type Operator struct {
	URL string // nats://127.0.0.1:port
	// Creds is the user's .creds content (decorated user JWT and seed),
	// CredsFile the same written to a file (mode 0600, in a TempDir).
	Creds     []byte
	CredsFile string
	// Seed is the user's seed, to look for it in logs.
	Seed string
}

// RunOperator starts a JetStream server on loopback that accepts only the
// user whose credentials it returns (signed by an account the server's
// trusted operator signed).
func RunOperator(tb testing.TB) Operator {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "natstest"
	ojwt, err := oc.Encode(okp)
	must(err)
	op, err := jwt.DecodeOperatorClaims(ojwt)
	must(err)

	// An account signed by the operator; JetStream in operator mode also
	// needs a system account.
	account := func(name string, js bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		c := jwt.NewAccountClaims(pub)
		c.Name = name
		if js {
			c.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		enc, err := c.Encode(okp)
		must(err)
		return kp, pub, enc
	}
	akp, apub, ajwt := account("hcpbot", true)
	_, spub, sjwt := account("SYS", false)

	ukp, err := nkeys.CreateUser()
	must(err)
	upub, err := ukp.PublicKey()
	must(err)
	useed, err := ukp.Seed()
	must(err)
	uc := jwt.NewUserClaims(upub)
	uc.Name = "hcpbot-test"
	ujwt, err := uc.Encode(akp)
	must(err)
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	must(err)
	file := filepath.Join(tb.TempDir(), "user.creds")
	must(os.WriteFile(file, creds, 0o600))

	resolver := &server.MemAccResolver{}
	must(resolver.Store(apub, ajwt))
	must(resolver.Store(spub, sjwt))
	srv := StartOptions(tb, &server.Options{
		ServerName: "natstest-operator", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: tb.TempDir(),
		TrustedOperators: []*jwt.OperatorClaims{op}, AccountResolver: resolver, SystemAccount: spub,
	})
	return Operator{URL: "nats://" + srv.Addr().String(), Creds: creds, CredsFile: file, Seed: string(useed)}
}
