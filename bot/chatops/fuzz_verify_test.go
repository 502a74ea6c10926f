package chatops

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// FuzzAuthenticate checks the Slack request verifier: whatever the
// timestamp header, signature header and body, a request reaches the
// handler only when it carries the right signature of exactly that
// timestamp and body, its timestamp is within MaxClockSkew and it was not
// seen before; anything else is answered 4xx/503 without a panic. signIt
// makes the fuzzer start from a valid signature (then skewed or replayed).
func FuzzAuthenticate(f *testing.F) {
	f.Add([]byte("command=%2Fhcp&text=status"), int64(0), "", "", true, false)
	f.Add([]byte("payload=%7B%7D"), int64(-360), "", "", true, false)
	f.Add([]byte("text=approve+act-7f3k9q"), int64(0), "", "", true, true)
	f.Add([]byte("x"), int64(0), "+1712345678", "v0=00", false, false)
	f.Add([]byte{}, int64(0), "", "v0=", false, false)
	f.Fuzz(func(t *testing.T, body []byte, skew int64, rawTS, sig string, signIt, replay bool) {
		now := time.Now()
		ts := rawTS
		if ts == "" {
			skew = max(min(skew, 1<<31), -(1 << 31))
			ts = strconv.FormatInt(now.Unix()+skew, 10)
		}
		mac := hmac.New(sha256.New, []byte(testSecret))
		mac.Write([]byte("v0:" + ts + ":"))
		mac.Write(body)
		valid := "v0=" + hex.EncodeToString(mac.Sum(nil))
		if signIt {
			sig = valid
		}
		calls := 0
		s, err := NewServer(testSecret, newFakeHandler(), WithMaxBodyBytes(1024))
		if err != nil {
			t.Fatal(err)
		}
		h := s.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.WriteHeader(http.StatusOK)
		}))
		send := func() int {
			req := httptest.NewRequest(http.MethodPost, "/slack/other", bytes.NewReader(body))
			req.Header.Set(headerTimestamp, ts)
			req.Header.Set(headerSignature, sig)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w.Code
		}
		code := send()
		if replay {
			if again := send(); calls > 1 || (code == http.StatusOK && again != http.StatusUnauthorized) {
				t.Fatalf("replay: first %d, second %d, handler calls %d", code, again, calls)
			}
		}

		sec, perr := strconv.ParseInt(ts, 10, 64)
		digits := len(ts) > 0 && len(ts) <= 12 && perr == nil && ts[0] != '+' && ts[0] != '-'
		off := now.Unix() - sec
		inWindow := digits && off <= int64(MaxClockSkew.Seconds())-2 && -off <= int64(MaxClockSkew.Seconds())-2
		outWindow := !digits || off > int64(MaxClockSkew.Seconds())+2 || -off > int64(MaxClockSkew.Seconds())+2
		rightSig := hmac.Equal([]byte(lowerHex(sig)), []byte(valid))
		small := len(body) <= 1024
		switch {
		case calls > 0 && (!rightSig || outWindow || !small):
			t.Fatalf("let through: ts %q (off %ds), sig right %v, body %d bytes; status %d", ts, off, rightSig, len(body), code)
		case calls == 0 && rightSig && inWindow && small:
			t.Fatalf("refused a valid request: ts %q (off %ds), body %d bytes; status %d", ts, off, len(body), code)
		case calls == 0 && code < 400:
			t.Fatalf("refused with status %d", code)
		}
	})
}

// lowerHex lower-cases the hex digits of a signature: Slack's verifier
// decodes hex, so upper-case digits verify too.
func lowerHex(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
