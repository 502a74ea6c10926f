package bus

import (
	"strings"
	"testing"
)

// Creds content that is not a .creds file is refused at Connect without
// being quoted: it may be a secret pasted into the wrong variable.
func TestCredsContentRefusedUnquoted(t *testing.T) {
	for name, content := range map[string]string{
		"no blocks": "SUAAVERYSECRETLOOKINGVALUE",
		"jwt only":  "-----BEGIN NATS USER JWT-----\neyJhbGciOiJlZDI1NTE5In0.secretpart.sig\n------END NATS USER JWT------\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := credsOption([]byte(content))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "secretpart") {
				t.Errorf("error quotes the content: %v", err)
			}
		})
	}
}
