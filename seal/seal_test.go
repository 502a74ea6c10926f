package seal_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/seal"
)

const ctxA, ctxB = "hcpbot-test-a-v1\n", "hcpbot-test-b-v1\n"

func newKey(t *testing.T, context string) seal.Signer {
	t.Helper()
	kp, pub := newPair(t)
	return seal.ForContext(kp, pub, context, "test: signs "+context+" only")
}

func newPair(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp, pub
}

// What Verify finds, and in which order: an untrusted key is refused as
// untrusted whatever its signature, so that a caller never takes a valid
// signature by a stranger's key for a forgery of the bot's, nor the other
// way round.
func TestVerify(t *testing.T) {
	bot, stranger := newKey(t, ctxA), newKey(t, ctxA)
	trusted := []string{bot.PublicKey()}
	body := []byte(`{"a":1}`)
	sig, err := seal.Sign(bot, ctxA, body)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := seal.Sign(stranger, ctxA, body)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), sig...)
	bad[0] ^= 1
	cases := []struct {
		name    string
		trusted []string
		key     string
		context string
		body    []byte
		sig     []byte
		want    error
	}{
		{"genuine", trusted, bot.PublicKey(), ctxA, body, sig, nil},
		{"no signature", trusted, bot.PublicKey(), ctxA, body, nil, seal.ErrUnsealed},
		{"no key", trusted, "", ctxA, body, sig, seal.ErrUnsealed},
		{"a stranger's valid signature", trusted, stranger.PublicKey(), ctxA, body, foreign, seal.ErrUntrustedKey},
		{"the bot's signature under a stranger's key", trusted, stranger.PublicKey(), ctxA, body, sig, seal.ErrUntrustedKey},
		{"a bit flipped", trusted, bot.PublicKey(), ctxA, body, bad, seal.ErrForged},
		{"another body", trusted, bot.PublicKey(), ctxA, []byte(`{"a":2}`), sig, seal.ErrForged},
		{"another use's context", trusted, bot.PublicKey(), ctxB, body, sig, seal.ErrForged},
		{"a trusted key that is no nkey", []string{"Unot-a-key"}, "Unot-a-key", ctxA, body, sig, seal.ErrForged},
	}
	for _, tc := range cases {
		err := seal.Verify(tc.trusted, tc.key, tc.context, tc.body, tc.sig)
		if tc.want == nil && err != nil || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// A key handed out for one use signs nothing of another's.
func TestForContextSignsItsUseOnly(t *testing.T) {
	a := newKey(t, ctxA)
	if _, err := seal.Sign(a, ctxB, []byte("x")); err == nil {
		t.Error("signed under another use's context")
	}
	if _, err := a.Sign([]byte("x" + ctxA)); err == nil {
		t.Error("signed what only contains its context")
	}
}

func TestSentinelsOf(t *testing.T) {
	unsealed, forged, untrusted := errors.New("u"), errors.New("f"), errors.New("t")
	full := seal.Sentinels{Unsealed: unsealed, Forged: forged, UntrustedKey: untrusted}
	two := seal.Sentinels{Forged: forged, UntrustedKey: untrusted}
	for _, tc := range []struct {
		s         seal.Sentinels
		err, want error
	}{
		{full, seal.ErrUnsealed, unsealed},
		{two, seal.ErrUnsealed, forged},
		{full, seal.ErrForged, forged},
		{full, seal.Verify([]string{"Ua"}, "Ub", ctxA, nil, []byte{1}), untrusted},
		// A user that left a sentinel out gets its forged one, and one
		// without any gets seal's: never nil, which the user's %w would
		// wrap as nothing its callers match (a forgery read as benign).
		{two, seal.Verify([]string{"Ua"}, "Ub", ctxA, nil, []byte{1}), untrusted},
		{seal.Sentinels{Forged: forged}, seal.Verify([]string{"Ua"}, "Ub", ctxA, nil, []byte{1}), forged},
		{seal.Sentinels{}, seal.ErrForged, seal.ErrForged},
		{seal.Sentinels{}, seal.ErrUnsealed, seal.ErrForged},
		{seal.Sentinels{UntrustedKey: untrusted}, seal.ErrUnsealed, seal.ErrForged},
	} {
		if got := tc.s.Of(tc.err); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A context string binds its use only as one line ended by its only
// newline. Without the newline, "hcpbot-test-a-v1" is a prefix of
// "hcpbot-test-a-v10\n" (another use, one day); empty, it is a prefix of
// everything. Sign, Verify and ForContext refuse such a context instead
// of making or accepting a signature that binds no use.
func TestMalformedContextBindsNoUse(t *testing.T) {
	kp, pub := newPair(t)
	a := seal.ForContext(kp, pub, ctxA, "test: signs "+ctxA+" only")
	body := []byte(`{"a":1}`)
	sig, err := seal.Sign(a, ctxA, body)
	if err != nil {
		t.Fatal(err)
	}
	trusted := []string{pub}
	noNewline := ctxA[:len(ctxA)-1]
	for _, context := range []string{"", noNewline, "\n", ctxA + ctxB, "hcpbot\ntest-a-v1\n"} {
		if s, err := seal.ForContext(kp, pub, context, "test").Sign([]byte(ctxB + "x")); err == nil {
			t.Errorf("ForContext(%q) signed another use's input: %x", context, s)
		}
		if _, err := seal.ForContext(kp, pub, context, "test").Sign([]byte(noNewline + "0\nx")); err == nil {
			t.Errorf("ForContext(%q) signed a longer-named use's input", context)
		}
		if _, err := seal.Sign(a, context, append([]byte(ctxA), body...)); err == nil {
			t.Errorf("Sign under %q made a signature of another use", context)
		}
	}
	// The verifier's side: a signature made for use A, checked under a
	// context that binds no use, with A's context moved into the body.
	for _, tc := range []struct {
		context string
		body    []byte
	}{
		{"", append([]byte(ctxA), body...)},
		{noNewline, append([]byte("\n"), body...)},
	} {
		if err := seal.Verify(trusted, pub, tc.context, tc.body, sig); !errors.Is(err, seal.ErrForged) {
			t.Errorf("Verify under %q: %v, want %v", tc.context, err, seal.ErrForged)
		}
	}
}
