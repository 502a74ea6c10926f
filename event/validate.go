package event

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxToken bounds IDs and snapshot run IDs, which travel in NATS headers.
const maxToken = 128

// ValidateSource checks a management cluster name. Sources are DNS-1123
// subdomains, like the Kubernetes names they usually mirror: that keeps
// them safe as subject tokens once '.' is escaped.
func ValidateSource(source string) error {
	if err := checkSource(source); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// The check functions below return errors without a sentinel: the exported
// caller adds the one that fits (ErrInvalid when building, ErrMalformed when
// decoding, ErrInvalidSubject when parsing a subject).

func checkSource(source string) error {
	if isDNSSubdomain(source) {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(source); len(errs) > 0 {
		return fmt.Errorf("source %q: %s", source, strings.Join(errs, "; "))
	}
	return nil
}

// checkNamespace checks a namespace, which Kubernetes restricts to a
// DNS-1123 label.
func checkNamespace(ns string) error {
	if len(ns) <= validation.DNS1123LabelMaxLength && isDNSLabel(ns) {
		return nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

// checkName checks an object name. HostedCluster names may contain '.',
// so the laxer subdomain rule applies.
func checkName(name string) error {
	if isDNSSubdomain(name) {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// checkType checks the syntax of a type (not whether it is known): a
// lower-case word, so it is a subject token as is.
func checkType(t Type) error {
	if t == "" || len(t) > 63 {
		return fmt.Errorf("type %q: want 1 to 63 characters", t)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return fmt.Errorf("type %q: want a lower-case letter followed by letters or digits", t)
		}
	}
	return nil
}

// checkToken checks an opaque identifier (event ID, snapshot run):
// visible ASCII only, since it ends up in a NATS header.
func checkToken(what, s string) error {
	if s == "" || len(s) > maxToken {
		return fmt.Errorf("%s: want 1 to %d characters, got %d", what, maxToken, len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("%s %q: want visible ASCII characters only", what, s)
		}
	}
	return nil
}

// isDNSSubdomain is validation.IsDNS1123Subdomain without its regular
// expression, for the valid case only: every event is checked on Encode
// and Decode, and the regexp was a tenth of decoding (make bench, B1).
// Invalid names go to the validation package for its error text.
func isDNSSubdomain(s string) bool {
	if len(s) > validation.DNS1123SubdomainMaxLength {
		return false
	}
	for {
		label, rest, more := strings.Cut(s, ".")
		if !isDNSLabel(label) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

// isDNSLabel matches [a-z0-9]([-a-z0-9]*[a-z0-9])? (no length check).
func isDNSLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
