package actions

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/redact"
)

// EventComponent reports the Events the executor records (source.component
// and reportingComponent).
const EventComponent = "hcpbot-agent"

// The reasons of the executor's Events, one per Outcome.
const (
	EventReasonApplied    = "HcpbotActionApplied"
	EventReasonUnchanged  = "HcpbotActionUnchanged"
	EventReasonRolledBack = "HcpbotActionRolledBack"
)

// maxEventMessage is the API server's limit on an Event's note
// (events.k8s.io/v1), which core/v1 readers share; kept for both.
const maxEventMessage = 1024

// Actors are the people behind an execution, as the approval recorded them.
type Actors struct {
	// RequestedBy proposed the change; empty means Change.RequestedBy.
	RequestedBy string
	Approvers   []string
	// As is the Kubernetes user the change was written as (Executor.As);
	// empty: the agent's own identity.
	As string
}

// RecordEvent records the execution of ch, which res reports, as one
// Kubernetes Event (type Normal) in the management cluster, on the object
// the change is about: the HostedCluster (or Proxy/cluster) of a noProxy
// change and of its rollback, the management Service of an exposure, the
// HostedCluster of an exposure's rollback. Its message names the action id,
// the requester, every approver and res's summary, with credentials
// redacted; its reason follows res.Outcome (EventReasonApplied, …).
//
// The Event is named after the object and the action id, so a retried
// execution (the agent died after the write and the request ran again)
// records the one Event the first attempt may have recorded: AlreadyExists
// is success.
//
// It is a core/v1 Event with firstTimestamp, lastTimestamp and count set,
// as client-go's record package writes them: `kubectl get events` and
// `kubectl describe` / `oc describe hostedcluster` read core/v1 (describe
// selects involvedObject name, namespace, kind and uid, so the uid is read
// from the object), and both APIs share one storage, so events.k8s.io/v1
// readers see it too; an events.k8s.io/v1 Event would carry no
// lastTimestamp, which older kubectl and oc show as an unknown age. An
// Event about cluster-scoped Proxy/cluster lives in namespace default, as
// client-go puts those.
//
// ch is the request the executor ran, already validated at the agent's
// boundary: RecordEvent does not validate it again and uses only its id,
// type and target.
func (x *Executor) RecordEvent(ctx context.Context, ch Change, res *Result, who Actors) error {
	if res == nil || !ValidID(ch.ID) {
		return fmt.Errorf("%w: an Event needs the result of a request with a valid id (%q)", ErrInvalid, ch.ID)
	}
	reason, ok := map[Outcome]string{OutcomeApplied: EventReasonApplied, OutcomeUnchanged: EventReasonUnchanged, OutcomeRolledBack: EventReasonRolledBack}[res.Outcome]
	if !ok {
		return fmt.Errorf("%w: no Event for outcome %q of action %s", ErrInvalid, res.Outcome, ch.ID)
	}
	ref, err := x.eventObject(ctx, ch)
	if err != nil {
		return err
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      eventName(ref.Name, ch.ID),
			Namespace: ns,
			Labels:    map[string]string{LabelManagedBy: ManagedBy, LabelActionID: ch.ID},
		},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             eventMessage(ch, res, who),
		Type:                corev1.EventTypeNormal,
		Source:              corev1.EventSource{Component: EventComponent},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Action:              string(ch.Type),
		ReportingController: EventComponent,
		ReportingInstance:   x.Instance,
	}
	_, err = x.Kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("record Event %s/%s of action %s: %w", ns, ev.Name, ch.ID, err)
	}
	return nil
}

// eventObject is the object ch changed, with its uid when it still exists.
func (x *Executor) eventObject(ctx context.Context, ch Change) (corev1.ObjectReference, error) {
	var obj noProxyObject
	switch {
	case ch.Type == TypeNoProxyPatch && ch.NoProxy != nil:
		obj = x.noProxyObject(ch.NoProxy.Target, ch.Cluster)
	case ch.Type == TypeRollback && ch.Rollback != nil && ch.Rollback.Undo.NoProxy != nil:
		u := ch.Rollback.Undo
		obj = x.noProxyObject(u.NoProxy.Target, u.Cluster)
	case ch.Type == TypeRollback && ch.Rollback != nil:
		// An exposure's rollback deleted its Services: the Event goes to
		// what remains, the HostedCluster.
		obj = x.noProxyObject(TargetHostedCluster, ch.Rollback.Undo.Cluster)
	case ch.Type == TypeExposeNodePort:
		return x.exposureService(ctx, ch)
	default:
		return corev1.ObjectReference{}, fmt.Errorf("%w: no Event for a %q request without its parameters", ErrInvalid, ch.Type)
	}
	ref := obj.ref
	u, err := obj.ri.Get(ctx, obj.name, metav1.GetOptions{})
	switch {
	case err == nil:
		ref.UID, ref.ResourceVersion = u.GetUID(), u.GetResourceVersion()
	case apierrors.IsNotFound(err):
		// Gone since: the Event still tells what happened to that name.
	default:
		return ref, fmt.Errorf("get %s %s for its Event: %w", ref.Kind, obj.name, err)
	}
	return ref, nil
}

// exposureService is the management Service exposure ch created, found by
// its action id label (listing is what the exposure itself is granted).
func (x *Executor) exposureService(ctx context.Context, ch Change) (corev1.ObjectReference, error) {
	ns := hypershift.ControlPlaneNamespace(ch.Cluster.Namespace, ch.Cluster.Name)
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: ns, Name: ManagementServiceName(ch.ID)}
	list, err := x.Kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: actionSelector(ch.ID)})
	if err != nil {
		return ref, fmt.Errorf("list management Services of action %s for its Event: %w", ch.ID, err)
	}
	if len(list.Items) == 1 {
		s := list.Items[0]
		ref.Name, ref.UID, ref.ResourceVersion = s.Name, s.UID, s.ResourceVersion
	}
	return ref, nil
}

// eventName is "<object>.<action id>", client-go's "<object>.<suffix>"
// shape with the action id as the suffix, so that every attempt of an
// action names the same Event.
func eventName(object, id string) string {
	if n := validation.DNS1123SubdomainMaxLength - len(id) - 1; len(object) > n {
		object = strings.TrimRight(object[:n], ".-")
	}
	return object + "." + id
}

func eventMessage(ch Change, res *Result, who Actors) string {
	requester := who.RequestedBy
	if requester == "" {
		requester = ch.RequestedBy
	}
	approvers := strings.Join(who.Approvers, ", ")
	if approvers == "" {
		approvers = "nobody recorded"
	}
	what := string(ch.Type)
	if ch.Type == TypeRollback && ch.Rollback != nil {
		what = "rollback of " + ch.Rollback.Undo.ActionID
	}
	as := ""
	if who.As != "" {
		as = ", written as Kubernetes user " + who.As
	}
	msg := fmt.Sprintf("hcpbot action %s (%s) %s: requested by %s, approved by %s%s. %s", ch.ID, what, res.Outcome, requester, approvers, as, res.Summary)
	return truncate(redact.RedactText(msg), maxEventMessage)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
