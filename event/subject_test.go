package event_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/event"
)

func TestSubjectRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		source  string
		cluster *event.ClusterRef
		typ     event.Type
		want    string
	}{
		{"plain", "mgmt-east", exampleHC, event.TypeNode, "hcpbot.events.mgmt-east.clusters.example.node"},
		{"dotted names", "mgmt.corp.example", &event.ClusterRef{Namespace: "clusters", Name: "ocp7.stormshift"}, event.TypeCrashLoop,
			"hcpbot.events.mgmt~corp~example.clusters.ocp7~stormshift.crashloop"},
		{"management level", "mgmt", nil, event.TypeOCPProxy, "hcpbot.events.mgmt._._.ocpproxy"},
		{"unknown but well-formed type", "mgmt", exampleHC, "futuretype2", "hcpbot.events.mgmt.clusters.example.futuretype2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := event.Event{Source: tt.source, Cluster: tt.cluster, Type: tt.typ}
			got, err := event.Subject(e)
			if err != nil || got != tt.want {
				t.Fatalf("Subject = %q, %v; want %q", got, err, tt.want)
			}
			parts, err := event.ParseSubject(got)
			if err != nil {
				t.Fatalf("ParseSubject(%q): %v", got, err)
			}
			want := event.SubjectParts{Source: tt.source, Cluster: tt.cluster, Type: tt.typ}
			if !reflect.DeepEqual(parts, want) {
				t.Errorf("ParseSubject = %+v, want %+v", parts, want)
			}
			// As NATS stores it with P = 3: the same parts and the tag.
			tag := event.Tag{Count: 3, Index: 2}
			tagged := event.TagSubject(got, tag)
			if parts, err = event.ParseSubject(tagged); err != nil {
				t.Fatalf("ParseSubject(%q): %v", tagged, err)
			}
			want.Tag = tag
			if !reflect.DeepEqual(parts, want) {
				t.Errorf("ParseSubject(tagged) = %+v, want %+v", parts, want)
			}
			if !event.OnSourceSubject(tagged, tt.source) {
				t.Errorf("OnSourceSubject(%q, %q) = false", tagged, tt.source)
			}
			for _, s := range []struct {
				subject string
				tag     event.Tag
			}{{got, event.Tag{}}, {tagged, tag}} {
				tok, tg, ok := event.SubjectSource(s.subject)
				if want, _ := event.SourceToken(tt.source); !ok || tok != want || tg != s.tag {
					t.Errorf("SubjectSource(%q) = %q, %+v, %v; want %q, %+v", s.subject, tok, tg, ok, want, s.tag)
				}
			}
		})
	}
}

func TestSubjectRejects(t *testing.T) {
	tests := []struct {
		name string
		e    event.Event
	}{
		{"empty source", event.Event{Type: event.TypeNode}},
		{"wildcard source", event.Event{Source: "*", Type: event.TypeNode}},
		{"source with >", event.Event{Source: "mg>mt", Type: event.TypeNode}},
		{"source with space", event.Event{Source: "mg mt", Type: event.TypeNode}},
		{"source with tilde", event.Event{Source: "mg~mt", Type: event.TypeNode}},
		{"underscore name", event.Event{Source: "mgmt", Cluster: &event.ClusterRef{Namespace: "clusters", Name: "_"}, Type: event.TypeNode}},
		{"empty cluster namespace", event.Event{Source: "mgmt", Cluster: &event.ClusterRef{Name: "example"}, Type: event.TypeNode}},
		{"dotted namespace", event.Event{Source: "mgmt", Cluster: &event.ClusterRef{Namespace: "a.b", Name: "example"}, Type: event.TypeNode}},
		{"empty type", event.Event{Source: "mgmt"}},
		{"dotted type", event.Event{Source: "mgmt", Type: "node.x"}},
		{"wildcard type", event.Event{Source: "mgmt", Type: "*"}},
		{"upper-case type", event.Event{Source: "mgmt", Type: "Node"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := event.Subject(tt.e); !errors.Is(err, event.ErrInvalid) {
				t.Errorf("Subject = %q, %v; want ErrInvalid", got, err)
			}
		})
	}
}

func TestParseSubjectRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"hcpbot.events",
		"hcpbot.events.mgmt.clusters.example",
		"hcpbot.events.mgmt.clusters.example.node.extra",
		// Partition tags: <P>.<k>, P >= 2, 0 <= k < P, plain decimals.
		"hcpbot.events.mgmt.clusters.example.node.2",
		"hcpbot.events.mgmt.clusters.example.node.2.2",
		"hcpbot.events.mgmt.clusters.example.node.1.0",
		"hcpbot.events.mgmt.clusters.example.node.2.-1",
		"hcpbot.events.mgmt.clusters.example.node.02.1",
		"hcpbot.events.mgmt.clusters.example.node.2.01",
		"hcpbot.events.mgmt.clusters.example.node.x.1",
		"hcpbot.events.mgmt.clusters.example.node.2.1.0",
		"hcpbot.actions.mgmt.clusters.example.node",
		"nats.events.mgmt.clusters.example.node",
		"hcpbot.events..clusters.example.node",
		"hcpbot.events.mgmt.clusters.example.",
		"hcpbot.events.*.clusters.example.node",
		"hcpbot.events.mgmt.clusters.example.>",
		"hcpbot.events.mgmt.clus ters.example.node",
		"hcpbot.events.mgmt._.example.node",
		"hcpbot.events.mgmt.clusters._.node",
		"hcpbot.events.mgmt.clusters.ex~~ample.node",
		"hcpbot.events.mgmt.clusters.~example.node",
		"hcpbot.events.mgmt.clus~ters.example.node", // namespaces have no dots
		"hcpbot.events.MGMT.clusters.example.node",
		"hcpbot.events.mgmt.clusters.example.Node",
	} {
		if p, err := event.ParseSubject(s); !errors.Is(err, event.ErrInvalidSubject) {
			t.Errorf("ParseSubject(%q) = %+v, %v; want ErrInvalidSubject", s, p, err)
		}
		// The consumer's pre-decode read refuses what it can tell without
		// checking names: the shape and the tag.
		if tok, tag, ok := event.SubjectSource(s); ok && (s == "" || strings.Count(s, ".") != 5 && strings.Count(s, ".") != 7 || tag == event.Tag{} && strings.Count(s, ".") == 7) {
			t.Errorf("SubjectSource(%q) = %q, %+v, true", s, tok, tag)
		}
	}
}

func TestSubjectFilter(t *testing.T) {
	tests := []struct {
		source  string
		cluster *event.ClusterRef
		typ     event.Type
		want    string
	}{
		{"", nil, "", "hcpbot.events.*.*.*.*"},
		{"mgmt.corp", nil, "", "hcpbot.events.mgmt~corp.*.*.*"},
		{"", nil, event.TypeNode, "hcpbot.events.*.*.*.node"},
		{"mgmt", &event.ClusterRef{Namespace: "clusters", Name: "a.b"}, "", "hcpbot.events.mgmt.clusters.a~b.*"},
		{"mgmt", &event.ClusterRef{Namespace: "clusters"}, event.TypeNode, "hcpbot.events.mgmt.clusters.*.node"},
		{"", &event.ClusterRef{Name: "example"}, "", "hcpbot.events.*.*.example.*"},
		{"", &event.ClusterRef{}, "", "hcpbot.events.*.*.*.*"},
		{"", &event.ClusterRef{Namespace: event.NoClusterToken, Name: event.NoClusterToken}, event.TypeSnapshotDone, "hcpbot.events.*._._.snapshotdone"},
	}
	for _, tt := range tests {
		got, err := event.SubjectFilter(tt.source, tt.cluster, tt.typ)
		if err != nil || got != tt.want {
			t.Errorf("SubjectFilter(%q, %v, %q) = %q, %v; want %q", tt.source, tt.cluster, tt.typ, got, err, tt.want)
		}
	}
	bad := []struct {
		source  string
		cluster *event.ClusterRef
		typ     event.Type
	}{
		{"*", nil, ""},
		{">", nil, ""},
		{"", nil, ">"},
		{"", &event.ClusterRef{Namespace: "*"}, ""},
		{"", &event.ClusterRef{Namespace: event.NoClusterToken, Name: "example"}, ""},
		{"", &event.ClusterRef{Namespace: event.NoClusterToken}, ""},
	}
	for _, tt := range bad {
		if got, err := event.SubjectFilter(tt.source, tt.cluster, tt.typ); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("SubjectFilter(%q, %v, %q) = %q, %v; want ErrInvalid", tt.source, tt.cluster, tt.typ, got, err)
		}
	}
}

func TestSourceSubjects(t *testing.T) {
	tests := []struct {
		fn   func(string) (string, error)
		want string
	}{
		{event.AuditSubject, "hcpbot.audit.mgmt~corp"},
	}
	for _, tt := range tests {
		if got, err := tt.fn("mgmt.corp"); err != nil || got != tt.want {
			t.Errorf("got %q, %v; want %q", got, err, tt.want)
		}
		if got, err := tt.fn("*"); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("wildcard source: got %q, %v; want ErrInvalid", got, err)
		}
	}
	if event.StreamName != "HCPBOT_EVENTS" || event.EventsStreamSubjects != "hcpbot.events.>" ||
		event.AuditFilter != "hcpbot.audit.*" {
		t.Error("stream or filter constants changed")
	}
}
