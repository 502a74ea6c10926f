package noproxy

import (
	"math/rand/v2"
	"strings"
)

// The generator builds NO_PROXY lists and URLs from pieces that sit on the
// corners of the three readings, for differential tests against httpproxy
// and the real curl and Python.

var genEntries = []string{
	"example.com", ".example.com", "*.example.com", "EXAMPLE.com", "com", "le.com", "example.com.",
	".com", "example.com:80", "example.com:443", "example.com:8080", "www.example.com", "*", "**",
	"10.0.0.1", "10.0.0.0/8", "10.0.0.1/0", "10.0.0.0/0", "10.1/8", "0.0.1", ".0.1", "10.0.0.1:80",
	"10.0.0.0/ 8", "10.0.0.0/+8", "10.0.0.0/8x", "10.0.0.0/33", "10.0.0.", "127.1", "127.0.0.0/8",
	"::1", "2001:db8::1", "2001:db8::/32", "[2001:db8::1]", "[2001:db8::1]:80", "fe80:", "2001:db8:0::1",
	"::ffff:10.0.0.1", "localhost", "LOCALHOST", "kubernetes", ".svc", "svc", "172.31.0.0/16",
	"a b", "", " ", "\t", "http://example.com", "example.com/path", ":80", "xn--bcher-kva.example",
	"bücher.example", "1", "0x7f.1", "192.168.1.5",
}

var genHosts = []string{
	"example.com", "www.example.com", "notexample.com", "EXAMPLE.COM", "www.example.com.", "com",
	"10.0.0.1", "10.1.2.3", "10.0.0.0", "127.0.0.1", "127.1", "0x7f.1", "2130706433", "0xc0.168.1.5",
	"192.168.1.5", "[::1]", "[2001:db8::1]", "[2001:db8:0:0:0:0:0:1]", "[fe80::1]", "[::ffff:10.0.0.1]",
	"localhost", "LOCALHOST", "kubernetes", "kubernetes.default.svc", "172.31.0.1", "xn--bcher-kva.example",
	"api.corp.example", "a.b.example.com", "svc", "1",
}

var genPorts = []string{"", ":80", ":443", ":8080", ":6443", ":0", ":080", ":99999"}

var genSeparators = []string{",", ", ", " ,", " ", ",,", "\t,", ""}

func genCase(r *rand.Rand) (noProxy, rawURL string) {
	host := genHosts[r.IntN(len(genHosts))]
	port := genPorts[r.IntN(len(genPorts))]
	var b strings.Builder
	n := r.IntN(4)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(genSeparators[r.IntN(len(genSeparators))])
		}
		if r.IntN(2) == 0 {
			b.WriteString(genVariant(r, host, port))
		} else {
			b.WriteString(genEntries[r.IntN(len(genEntries))])
		}
	}
	scheme := "http"
	if r.IntN(2) == 0 {
		scheme = "https"
	}
	return b.String(), scheme + "://" + host + port + "/"
}

// genVariant derives an entry from the URL's host so that about half of
// the generated lists come close to matching.
func genVariant(r *rand.Rand, host, port string) string {
	bare := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	parent := bare
	if i := strings.IndexByte(bare, '.'); i >= 0 && !strings.ContainsAny(bare, ":") {
		parent = bare[i+1:]
	}
	switch r.IntN(12) {
	case 0:
		return bare
	case 1:
		return "." + parent
	case 2:
		return "*." + parent
	case 3:
		return parent
	case 4:
		return strings.ToUpper(bare)
	case 5:
		return bare + "."
	case 6:
		return host + port
	case 7:
		return host + genPorts[r.IntN(len(genPorts))]
	case 8:
		return bare + "/" + []string{"8", "16", "24", "32", "0", " 8", "+8", "33", "x"}[r.IntN(9)]
	case 9:
		if i := strings.LastIndexByte(bare, '.'); i > 0 {
			return bare[:i] + ".0/24"
		}
		return bare + "/64"
	case 10:
		return " " + bare + "\t"
	}
	return "\t" + parent + " "
}
