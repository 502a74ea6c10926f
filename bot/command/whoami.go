package command

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/identity"
)

// whoami answers `whoami`: the asking person's Kubernetes identity on each
// management cluster the bot knows (its events' sources and those the
// identities name), then on any other, and through which entry. Only the
// person sees it.
func (c *Handler) whoami(ctx context.Context, user string) chatops.Reply {
	m := c.Identities
	if m.Empty() {
		return chatops.Reply{Text: "No identities are configured (the configuration's identities section): the agent makes every change as itself, with its own ServiceAccount's rights, on every management cluster."}
	}
	w := &whoamiLookup{h: c, m: m, user: user}
	w.resolveGroups(ctx)
	var b strings.Builder
	fmt.Fprintf(&b, "Your Kubernetes identity (Slack user `%s`) per management cluster: the agent makes a change you approve there as this identity, so that cluster's RBAC decides what you may change.", blockkit.EscapeCode(user))
	if m.Required {
		b.WriteString(" identities.required is on: without an identity there, the agent does not act on your approval.")
	}
	b.WriteByte('\n')
	sources := c.whoamiSources()
	for i, s := range sources {
		if b.Len() > maxReply {
			fmt.Fprintf(&b, "… and %d more management clusters.\n", len(sources)-i)
			break
		}
		fmt.Fprintf(&b, "• `%s`: %s\n", blockkit.EscapeCode(s), w.on(ctx, s))
	}
	other := "every management cluster"
	if len(sources) > 0 {
		other = "any other management cluster"
	}
	// No entry names the empty source, so only the entries for all
	// clusters apply to it.
	fmt.Fprintf(&b, "• %s: %s", other, w.on(ctx, ""))
	return chatops.Reply{Text: b.String()}
}

// whoamiSources are the management clusters the bot has events from and
// those the identities name, sorted.
func (c *Handler) whoamiSources() []string {
	var out []string
	for _, k := range c.Bot.Clusters() {
		out = append(out, k.Source)
	}
	for _, e := range c.Identities.Entries {
		out = append(out, e.Clusters...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// whoamiLookup is one `whoami`: the person's groups and e-mail, each read
// from Slack at most once.
type whoamiLookup struct {
	h    *Handler
	m    identity.Map
	user string

	member  []string          // the groups the map names that the user is in
	unknown map[string]string // group → why its members could not be read

	emailRead bool
	email     string
	emailErr  error
}

// resolveGroups reads the members of every group the map names.
func (w *whoamiLookup) resolveGroups(ctx context.Context) {
	w.unknown = map[string]string{}
	for _, e := range w.m.Entries {
		g := e.Slack
		if !e.Group() || slices.Contains(w.member, g) || w.unknown[g] != "" {
			continue
		}
		if w.h.Groups == nil {
			w.unknown[g] = "this bot cannot read Slack user groups"
			continue
		}
		members, err := w.h.Groups.GroupMembers(ctx, g)
		switch {
		case err != nil:
			w.unknown[g] = "its members could not be read from Slack: " + errText(err)
		case slices.Contains(members, w.user):
			w.member = append(w.member, g)
		}
	}
}

// on describes the person's identity on source ("" for a cluster no entry
// names).
func (w *whoamiLookup) on(ctx context.Context, source string) string {
	_, e, err := w.m.For(source, w.user, w.member, "")
	if len(w.unknown) > 0 {
		// Were the user in the groups that could not be read, would
		// another entry apply? Then the answer is not known.
		all := slices.Concat(w.member, slices.Collect(maps.Keys(w.unknown)))
		if _, e2, err2 := w.m.For(source, w.user, all, ""); !reflect.DeepEqual(e, e2) || (err == nil) != (err2 == nil) {
			return "cannot tell: " + w.whyUnknown(source)
		}
	}
	if e.Slack == "" {
		if w.m.Required {
			return "no identity: with identities.required the agent will not act on your approval there"
		}
		return "none: the agent acts as itself"
	}
	email := ""
	if e.EmailPrefix != "" {
		var err error
		if email, err = w.emailOf(ctx); err != nil {
			return fmt.Sprintf("cannot tell: %s makes your user name of your Slack e-mail, which could not be read: %s", w.entryName(e), errText(err))
		}
	}
	id, e, err := w.m.For(source, w.user, w.member, email)
	if err != nil {
		return "cannot tell: " + errText(err)
	}
	return describeIdentity(id, e, w.entryName(e))
}

// whyUnknown names the groups whose members could not be read and that
// apply on source.
func (w *whoamiLookup) whyUnknown(source string) string {
	var why []string
	for _, g := range slices.Sorted(maps.Keys(w.unknown)) {
		for _, e := range w.m.Entries {
			if e.Slack == g && (len(e.Clusters) == 0 || slices.Contains(e.Clusters, source)) {
				why = append(why, fmt.Sprintf("the entry for the Slack user group `%s` might apply, but %s", g, w.unknown[g]))
				break
			}
		}
	}
	return strings.Join(why, "; ")
}

func (w *whoamiLookup) emailOf(ctx context.Context) (string, error) {
	if !w.emailRead {
		w.emailRead = true
		if w.h.Emails == nil {
			w.emailErr = fmt.Errorf("%w: this bot cannot read Slack e-mails", ErrNoEmail)
		} else {
			w.email, w.emailErr = w.h.Emails.Email(ctx, w.user)
		}
	}
	return w.email, w.emailErr
}

// entryName says which entry of the map applies: its place and what it
// names.
func (w *whoamiLookup) entryName(e identity.Entry) string {
	i := slices.IndexFunc(w.m.Entries, func(x identity.Entry) bool { return reflect.DeepEqual(x, e) })
	by := "your user ID"
	if e.Group() {
		by = fmt.Sprintf("the Slack user group `%s`", blockkit.EscapeCode(e.Slack))
	}
	return fmt.Sprintf("identities.map[%d] (%s)", i, by)
}

func describeIdentity(id identity.Identity, e identity.Entry, entry string) string {
	s := "user `" + blockkit.EscapeCode(id.User) + "`"
	if len(id.Groups) > 0 {
		gs := make([]string, len(id.Groups))
		for i, g := range id.Groups {
			gs[i] = "`" + blockkit.EscapeCode(g) + "`"
		}
		s += ", groups " + strings.Join(gs, ", ")
	}
	s += " — " + entry
	if e.EmailPrefix != "" {
		s += ", the prefix `" + blockkit.EscapeCode(e.EmailPrefix) + "` and your Slack e-mail"
	}
	switch {
	case slices.Contains(id.Hosted, identity.AllHosted):
		s += "; in every hosted cluster too"
	case len(id.Hosted) > 0:
		hs := make([]string, len(id.Hosted))
		for i, h := range id.Hosted {
			hs[i] = "`" + blockkit.EscapeCode(h) + "`"
		}
		s += "; in hosted clusters " + strings.Join(hs, ", ") + " too"
	}
	return s
}
