package command

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
)

// statusBudget bounds `/hcp status`: one message a person reads, far
// inside the 40,000 characters Slack takes in a message's text (the reply
// is cut there; at 2,000 hosted clusters a line each was 64,000). Within
// it the reply accounts for every hosted cluster: each one that needs
// attention listed, or counted with the command that lists it; the
// healthy listed while they fit, else counted per management cluster.
const statusBudget = 12000

// statusTrailer is what the budget keeps for the healthy clusters' counts
// and the lines that say what is not listed.
const statusTrailer = 2500

// Ranks of a cluster's state, the order `status` lists them in.
const (
	rankUnwatched = iota // the bot is blind there: first
	rankCritical
	rankWarning
	rankOther
	rankHealthy
)

// clusterStatus is one hosted cluster's line of `status`.
type clusterStatus struct {
	key  diagnose.Key
	rank int
	line string // "<key>: <state>", escaped
}

// rankOf is where a cluster of state's first diagnosis d goes in the
// listing.
func rankOf(unwatched bool, d []diagnose.Diagnosis) int {
	switch {
	case unwatched:
		return rankUnwatched
	case len(d) == 0:
		return rankHealthy
	case d[0].Severity == diagnose.SeverityCritical:
		return rankCritical
	case d[0].Severity == diagnose.SeverityWarning:
		return rankWarning
	}
	return rankOther
}

// status answers `/hcp status`: of one cluster (ref), of one management
// cluster's (mgmt), or of the fleet. What reaches nobody comes first
// (channels the bot cannot post to, silences refused), then a summary,
// then the clusters that need attention, worst first, then the healthy.
// Nothing is cut silently: what is not listed is counted, with the
// command that lists it.
func (c *Handler) status(ref *chatops.ClusterRef, mgmt string) chatops.Reply {
	var b strings.Builder
	// Incidents meant for a channel the bot cannot post to reach nobody:
	// that comes first, whatever cluster was asked about.
	if c.Delivery != nil {
		for _, p := range c.Delivery.Unpostable() {
			fmt.Fprintf(&b, "cannot post to <#%s>: %s (since %s)\n", p.Channel, p.Error, p.Since.UTC().Format("2006-01-02 15:04 UTC"))
		}
	}
	c.refusedSilences(&b)
	var all []clusterStatus
	for _, l := range c.statusLines(ref) {
		if mgmt != "" && l.Key.Source != mgmt {
			continue
		}
		all = append(all, clusterStatus{key: l.Key, rank: l.Rank, line: fmt.Sprintf("%s: %s\n", l.Key, esc(l.State))})
	}
	switch {
	case len(all) == 0 && mgmt != "":
		fmt.Fprintf(&b, "No hosted clusters known on management cluster %s.", esc(mgmt))
	case len(all) == 0:
		b.WriteString("No hosted clusters known yet.")
	case ref != nil:
		for _, st := range all {
			b.WriteString(st.line)
		}
	default:
		writeFleetStatus(&b, all, mgmt)
	}
	return chatops.Reply{Text: b.String()}
}

// writeFleetStatus writes the summary and the clusters of all, within
// statusBudget.
func writeFleetStatus(b *strings.Builder, all []clusterStatus, mgmt string) {
	slices.SortStableFunc(all, func(a, b clusterStatus) int { return cmp.Compare(a.rank, b.rank) })
	var by [rankHealthy + 1]int
	sources := map[string]int{} // healthy hosted clusters per management cluster
	for _, st := range all {
		by[st.rank]++
		if st.rank == rankHealthy {
			sources[st.key.Source]++
		}
	}
	attention := len(all) - by[rankHealthy]
	where := "on " + plural(len(distinctSources(all)), "management cluster")
	if mgmt != "" {
		where = "on management cluster " + esc(mgmt)
	}
	fmt.Fprintf(b, "*%s* %s: %s healthy", plural(len(all), "hosted cluster"), where, thousands(by[rankHealthy]))
	if attention > 0 {
		var parts []string
		for rank, name := range []string{"not watched", "critical", "warning", "other"} {
			if by[rank] > 0 {
				parts = append(parts, thousands(by[rank])+" "+name)
			}
		}
		fmt.Fprintf(b, ", %s %s attention (%s)", thousands(attention), needs(attention), strings.Join(parts, ", "))
	}
	b.WriteString(".\n")

	listed := 0
	for _, st := range all[:attention] {
		if b.Len()+len(st.line) > statusBudget-statusTrailer {
			break
		}
		b.WriteString(st.line)
		listed++
	}
	if left := attention - listed; left > 0 {
		how := "`/hcp status <management cluster>:` lists one management cluster's"
		if mgmt != "" {
			how = fmt.Sprintf("`/hcp status %s:<namespace>/<name>` shows one", esc(mgmt))
		}
		fmt.Fprintf(b, "… and %s more %s attention, not listed here: %s, `/hcp incidents` their incidents.\n", thousands(left), needs(left), how)
	}

	healthy := all[attention:]
	size := 0
	for _, st := range healthy {
		size += len(st.line)
	}
	if b.Len()+size <= statusBudget {
		for _, st := range healthy {
			b.WriteString(st.line)
		}
		return
	}
	if mgmt != "" {
		// One management cluster's, too many to list: as many as fit,
		// and how many are not.
		shown := 0
		for _, st := range healthy {
			if b.Len()+len(st.line) > statusBudget-200 {
				break
			}
			b.WriteString(st.line)
			shown++
		}
		fmt.Fprintf(b, "… and %s more healthy hosted clusters on %s, not listed here: `/hcp status %s:<namespace>/<name>` shows one.\n",
			thousands(len(healthy)-shown), esc(mgmt), esc(mgmt))
		return
	}
	names := make([]string, 0, len(sources))
	for s := range sources {
		names = append(names, s)
	}
	slices.Sort(names)
	b.WriteString(countedHead + " (`/hcp status <management cluster>:` lists one's): ")
	for i, s := range names {
		item := fmt.Sprintf("%s %s", esc(s), thousands(sources[s]))
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len()+len(item) > statusBudget-150 {
			rest := 0
			for _, o := range names[i:] {
				rest += sources[o]
			}
			fmt.Fprintf(b, "… and %s more management clusters (%s healthy hosted clusters)", thousands(len(names)-i), thousands(rest))
			break
		}
		b.WriteString(item)
	}
	b.WriteString(".\n")
}

func distinctSources(all []clusterStatus) map[string]bool {
	out := map[string]bool{}
	for _, st := range all {
		out[st.key.Source] = true
	}
	return out
}

func needs(n int) string {
	if n == 1 {
		return "needs"
	}
	return "need"
}

// plural renders "1 hosted cluster", "2,000 hosted clusters".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return thousands(n) + " " + noun + "s"
}

// thousands renders n with thousands separators: 20,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

var (
	summaryRE     = regexp.MustCompile(`(?m)^\*(` + number + `) hosted clusters?\* on `)
	listedRE      = regexp.MustCompile(`(?m)^[a-z0-9-]+/[a-z0-9-]+/[a-z0-9.-]+: `)
	notListedRE   = regexp.MustCompile(`… and (` + number + `) more (?:needs? attention|healthy hosted clusters)`)
	countedRE     = regexp.MustCompile(`(?:: |, )[a-z0-9-]+ (` + number + `)`)
	countedRestRE = regexp.MustCompile(`more management clusters \((` + number + `) healthy`)
)

// number is a count as thousands writes it.
const number = `\d{1,3}(?:,\d{3})*`

const countedHead = "Healthy, counted per management cluster"

// StatusAccounted reads a fleet's or a management cluster's `/hcp status`
// reply as a person would: total is the hosted clusters its summary
// counts, accounted those it lists one by one or counts with the command
// that lists them; ok is false without a summary. The reply is complete
// when both are the fleet's. Tests and B6 check it so.
func StatusAccounted(text string) (total, accounted int, ok bool) {
	m := summaryRE.FindStringSubmatch(text)
	if m == nil {
		return 0, 0, false
	}
	total = atoi(m[1])
	accounted = len(listedRE.FindAllString(text, -1))
	for _, m := range notListedRE.FindAllStringSubmatch(text, -1) {
		accounted += atoi(m[1])
	}
	if _, counts, found := strings.Cut(text, countedHead); found {
		counts, _, _ = strings.Cut(counts, "\n")
		_, counts, _ = strings.Cut(counts, "lists one's)")
		for _, m := range countedRE.FindAllStringSubmatch(counts, -1) {
			accounted += atoi(m[1])
		}
		for _, m := range countedRestRE.FindAllStringSubmatch(counts, -1) {
			accounted += atoi(m[1])
		}
	}
	return total, accounted, true
}

func atoi(s string) int {
	n, _ := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	return n
}
