package silence

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

func (s *Store) validate(sil Silence) error {
	var problems []string
	switch {
	case sil.Cluster == "" && sil.Incident == "":
		problems = append(problems, "names neither a cluster nor an incident")
	case sil.Cluster != "" && sil.Incident != "":
		problems = append(problems, "names both a cluster and an incident")
	case sil.Cluster != "" && !validCluster(sil.Cluster):
		problems = append(problems, fmt.Sprintf("cluster %q is not <mgmt>/<namespace>/<name>", clip(sil.Cluster, 80)))
	case sil.Incident != "" && !incidentPattern.MatchString(sil.Incident):
		problems = append(problems, fmt.Sprintf("incident %q is not an incident key", clip(sil.Incident, 80)))
	}
	if !validText(sil.CreatedBy, maxUserLen) || sil.CreatedBy == "" {
		problems = append(problems, "needs the id of the user who creates it")
	}
	if utf8.RuneCountInString(sil.Reason) > MaxReasonRunes {
		problems = append(problems, fmt.Sprintf("reason longer than %d characters", MaxReasonRunes))
	}
	switch d := sil.ExpiresAt.Sub(sil.CreatedAt); {
	case sil.ExpiresAt.IsZero() || d <= 0:
		problems = append(problems, "expires before it starts")
	case d > s.max+clockSkew:
		problems = append(problems, fmt.Sprintf("lasts %s, longer than the maximum of %s", d.Round(time.Minute), s.max))
	}
	if len(problems) > 0 {
		return fmt.Errorf("silence: %w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// validCluster accepts "<source>/<namespace>/<name>" with printable,
// space-free parts.
func validCluster(c string) bool {
	if len(c) > maxClusterLen || !validText(c, maxClusterLen) || strings.ContainsFunc(c, unicode.IsSpace) {
		return false
	}
	parts := strings.Split(c, "/")
	return len(parts) == 3 && !slices.Contains(parts, "")
}

func validText(s string, n int) bool {
	return len(s) <= n && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	})
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
