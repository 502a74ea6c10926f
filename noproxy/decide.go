package noproxy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Client is a family of HTTP clients that share one NO_PROXY reading.
type Client int

// The client families. Each is modelled on one source; see the files
// gofamily.go, curl.go, python.go, urllib.go, wget.go and node.go.
const (
	Go Client = iota + 1
	Curl
	Python // requests
	// Urllib is Python's standard library without requests (Ansible).
	Urllib
	Wget
	// Node is the proxy-from-env npm package (axios).
	Node
)

// Clients returns the families the cluster checks (Lint's coverage
// findings, the bot's proxy warnings) judge by default, in display order.
func Clients() []Client { return []Client{Go, Curl, Python} }

// AllClients returns every modelled family in display order.
func AllClients() []Client { return []Client{Go, Curl, Python, Urllib, Wget, Node} }

// ParseClient reads a family name as String prints it; "requests" is
// accepted for Python and "ansible" for Urllib.
func ParseClient(s string) (Client, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "go":
		return Go, nil
	case "curl":
		return Curl, nil
	case "python", "requests":
		return Python, nil
	case "urllib", "ansible":
		return Urllib, nil
	case "wget":
		return Wget, nil
	case "node", "nodejs", "proxy-from-env":
		return Node, nil
	}
	return 0, fmt.Errorf("%w %q: want one of go, curl, python, urllib, wget, node", ErrUnknownClient, s)
}

func (c Client) String() string {
	switch c {
	case Go:
		return "go"
	case Curl:
		return "curl"
	case Python:
		return "python"
	case Urllib:
		return "urllib"
	case Wget:
		return "wget"
	case Node:
		return "node"
	}
	return fmt.Sprintf("Client(%d)", int(c))
}

// MarshalText makes clients read "go", "curl", "python", ... in JSON.
func (c Client) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// Decision is where a client sends a request.
type Decision int

// Direct means NO_PROXY exempts the URL; Proxy means the configured proxy
// is used.
const (
	Proxy Decision = iota + 1
	Direct
)

func (d Decision) String() string {
	switch d {
	case Direct:
		return "direct"
	case Proxy:
		return "proxy"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// MarshalText makes decisions read "direct"/"proxy" in JSON.
func (d Decision) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Errors callers branch on. Returned errors wrap one of them.
var (
	// ErrInvalidURL: the URL does not parse, has no host, or the client
	// itself would reject it (Python's urlsplit/port checks).
	ErrInvalidURL = errors.New("invalid URL")
	// ErrUnsupportedScheme: only http and https URLs have a proxy here.
	ErrUnsupportedScheme = errors.New("unsupported URL scheme")
	// ErrUnknownClient: the Client value is not one of the families.
	ErrUnknownClient = errors.New("unknown client")
	// ErrUnsupportedInput: input the model refuses rather than guess at
	// (NUL bytes or invalid UTF-8, which the C and Python clients cannot
	// even receive through the environment).
	ErrUnsupportedInput = errors.New("unsupported input")
)

// Verdict is a decision with the reason for it.
type Verdict struct {
	Client   Client   `json:"client"`
	Decision Decision `json:"decision"`
	// Entry is the list entry (as written) that exempted the URL, or the
	// whole value when the client only honours a whole-value "*".
	Entry string `json:"entry,omitempty"`
	// Why is a short human explanation.
	Why string `json:"why"`
}

// Decide reports whether client sends rawURL directly or through the proxy,
// given the NO_PROXY value noProxy. It assumes a proxy is configured for the
// URL's scheme (an unset proxy always means Direct) and answers only whether
// NO_PROXY, or a client's built-in exemption, bypasses it.
func Decide(client Client, noProxy, rawURL string) (Decision, error) {
	v, err := Explain(client, noProxy, rawURL)
	if err != nil {
		return 0, err
	}
	return v.Decision, nil
}

// Explain is Decide with the reason.
func Explain(client Client, noProxy, rawURL string) (Verdict, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Verdict{}, err
	}
	var v Verdict
	switch client {
	case Go:
		v = goDecide(noProxy, u)
	case Curl:
		v, err = curlDecide(noProxy, u)
	case Python:
		v, err = pythonDecide(noProxy, rawURL)
	case Urllib:
		v, err = urllibDecide(noProxy, rawURL)
	case Wget:
		v, err = wgetDecide(noProxy, u)
	case Node:
		v, err = nodeDecide(noProxy, u)
	default:
		return Verdict{}, fmt.Errorf("%w: %d", ErrUnknownClient, int(client))
	}
	if err != nil {
		return Verdict{}, err
	}
	v.Client = client
	return v, nil
}

// parseURL is the common gate for every family: Go's parser must accept the
// URL, the scheme must be http or https and the host must not be empty.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the url.Error repeats the raw URL, which may hold a password
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		if u.Scheme == "" {
			return nil, fmt.Errorf("%w: missing scheme (want http:// or https://)", ErrInvalidURL)
		}
		return nil, fmt.Errorf("%w %q: want http or https", ErrUnsupportedScheme, u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%w: no host", ErrInvalidURL)
	}
	return u, nil
}

func direct(entry, why string) Verdict { return Verdict{Decision: Direct, Entry: entry, Why: why} }

func proxied(why string) Verdict { return Verdict{Decision: Proxy, Why: why} }

const whyNoMatch = "no entry matches"

// hasNUL reports input that cannot pass through a C string or os.environ.
func hasNUL(s ...string) bool {
	for _, x := range s {
		if strings.IndexByte(x, 0) >= 0 {
			return true
		}
	}
	return false
}
