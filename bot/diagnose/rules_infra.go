package diagnose

import (
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// proxyCAInvalid: the proxy's trusted CA bundle is missing, unusable or
// expired, as HyperShift (ValidProxyConfiguration=False) or the agent's
// reading of the ConfigMap (HostedClusterState.TrustedCA) says. Expiry is
// judged against now. Certificates are never shown: only the subject and
// NotAfter of the first to expire.
func proxyCAInvalid(c *Cluster, now time.Time, x Explained) (Diagnosis, bool) {
	hc, ok := c.live()
	if !ok {
		return Diagnosis{}, false
	}
	d := Diagnosis{Severity: SeverityWarning}
	cond := c.explainCond(&d, condValidProxyConfiguration, x, isFalse)
	ca := hc.TrustedCA
	problem := ""
	if ca != nil {
		switch {
		case !ca.Found:
			problem = "missing"
		case ca.Problem != "":
			problem = "unusable"
		case !ca.NotAfter.IsZero() && ca.NotAfter.Before(now):
			problem = "expired"
		}
	}
	// HyperShift has one reason for every failure; its message tells them
	// apart (proxy/validation.go:24-69).
	verdict := ""
	if cd, ok := c.hcCond(condValidProxyConfiguration, isFalse); ok && cond {
		verdict = proxyCAVerdict(cd.Message)
	}
	caKey := ""
	if problem != "" {
		caKey = "trustedca/" + c.key.Cluster.Namespace + "/" + ca.ConfigMap
		if x.Has(caKey) {
			problem = ""
		} else {
			d.Symptoms = append(d.Symptoms, caKey)
		}
	}
	if !cond && problem == "" {
		return Diagnosis{}, false
	}
	if problem == "" && (verdict == "missing" || verdict == "expired") {
		problem = verdict // HyperShift's word only: no ConfigMap symptom
	}
	if problem == "missing" || problem == "expired" {
		d.Severity = SeverityCritical
	}
	if verdict == "not-yet-valid" && problem == "" {
		problem = verdict
	}
	if x.brief {
		return d, true
	}
	name := firstNonEmpty(hc.Proxy.TrustedCA, "<trustedCA.name>")
	if ca != nil && ca.ConfigMap != "" {
		name = ca.ConfigMap
	}
	cm := c.key.Cluster.Namespace + "/" + name
	if ca != nil {
		d.Evidence = append(d.Evidence, caEvidence(c, ca, now))
	}
	subject := ""
	if ca != nil {
		subject = ca.Subject
	}
	switch problem {
	case "not-yet-valid":
		cd, _ := c.hcCond(condValidProxyConfiguration, isFalse)
		cn := strings.TrimSpace(cd.Message[strings.Index(cd.Message, msgNotYetValid)+len(msgNotYetValid):])
		d.Title = fmt.Sprintf("Proxy CA %q in %s of %s is not valid yet", cn, cm, c.label())
		d.RootCause = fmt.Sprintf("HyperShift rejects the proxy's trusted CA bundle of %s because certificate %q is not valid yet (its NotBefore is in the future): the management cluster's clock is behind, or the CA was issued with a start date ahead of now. It is not expired: check the clocks (chrony) first, else reissue the CA with a current NotBefore or wait until it starts.", c.key.Cluster, cn)
		d.Confidence = Confidence{ConfidenceHigh, "HyperShift's validation names the certificate that is not valid yet"}
	case "missing":
		d.Title = fmt.Sprintf("Proxy CA ConfigMap %s of %s is missing", cm, c.label())
		d.RootCause = fmt.Sprintf("The ConfigMap %s named by spec.configuration.proxy.trustedCA of %s does not exist, so the workers cannot trust a TLS-intercepting proxy. Create it with the proxy's CA under key ca-bundle.crt, or correct trustedCA.name.", cm, c.key.Cluster)
		if ca == nil || ca.Found {
			// Only HyperShift's message says so, and it may mean the
			// ConfigMap or its key.
			cd, _ := c.hcCond(condValidProxyConfiguration, isFalse)
			d.Title = fmt.Sprintf("Proxy CA bundle %s of %s is missing", cm, c.label())
			d.RootCause = fmt.Sprintf("HyperShift finds no proxy CA bundle for %s (%s), so the workers cannot trust a TLS-intercepting proxy. Create ConfigMap %s with the proxy's CA under key ca-bundle.crt, or correct trustedCA.name.", c.key.Cluster, clip(withoutPEM(cd.Message), maxTitleReason), cm)
		}
	case "unusable":
		d.Title = fmt.Sprintf("Proxy CA bundle %s of %s is unusable", cm, c.label())
		d.RootCause = fmt.Sprintf("The proxy's CA bundle in ConfigMap %s of %s is unusable (%s), so the workers cannot trust a TLS-intercepting proxy. Put the proxy's CA as PEM under key ca-bundle.crt.", cm, c.key.Cluster, strings.TrimRight(strings.ReplaceAll(clip(withoutPEM(ca.Problem), maxTitleReason), ". ", "; "), ". "))
	case "expired":
		if ca != nil && !ca.NotAfter.IsZero() && ca.NotAfter.Before(now) {
			d.Title = fmt.Sprintf("Proxy CA %q in %s of %s expired at %s", subject, cm, c.label(), ca.NotAfter.Format(time.RFC3339))
			d.RootCause = fmt.Sprintf("The proxy's CA %q in ConfigMap %s of %s expired at %s, so TLS through the proxy fails verification. Replace key ca-bundle.crt with the proxy's current CA.", subject, cm, c.key.Cluster, ca.NotAfter.Format(time.RFC3339))
		} else {
			d.Title = fmt.Sprintf("A proxy CA in %s of %s is expired", cm, c.label())
			d.RootCause = fmt.Sprintf("HyperShift rejects the proxy's trusted CA bundle of %s because a certificate in ConfigMap %s is no longer valid (expired), so TLS through the proxy fails verification. Replace key ca-bundle.crt with the proxy's current CA.", c.key.Cluster, cm)
		}
	default:
		d.Title = fmt.Sprintf("HyperShift rejects the proxy CA bundle %s of %s", cm, c.label())
		cd, _ := c.hcCond(condValidProxyConfiguration, isFalse)
		// HyperShift only reports it (hostedcluster_controller.go:1039-1063):
		// nothing waits on it, but the workers cannot use the bundle.
		d.RootCause = fmt.Sprintf("HyperShift rejects the proxy's trusted CA bundle of %s (%s: %s), so workers cannot trust a TLS-intercepting proxy with it. Check ConfigMap %s, key ca-bundle.crt: it must hold valid, current PEM certificates.", c.key.Cluster, condShort(cd), clip(withoutPEM(cd.Message), maxTitleReason), cm)
	}
	if problem != "not-yet-valid" {
		d.Confidence = Confidence{ConfidenceHigh, "the agent read the ConfigMap, or HyperShift validated it"}
	}
	if problem == "" {
		d.Confidence = Confidence{ConfidenceMedium, "HyperShift's condition is observed directly; the agent did not report what is wrong with the bundle"}
	}
	d.NextSteps = []string{
		fmt.Sprintf("oc get configmap -n %s %s -o jsonpath='{.data.ca-bundle\\.crt}' | openssl x509 -noout -subject -enddate (management cluster): subject and expiry of the first certificate", c.key.Cluster.Namespace, name),
		fmt.Sprintf("oc create configmap %s -n %s --from-file=ca-bundle.crt=<proxy-ca.pem> --dry-run=client -o yaml | oc apply -f - (management cluster): put the proxy's current CA in place", name, c.key.Cluster.Namespace),
		fmt.Sprintf("oc get hostedcluster -n %s %s -o jsonpath='{.status.conditions[?(@.type==\"%s\")]}' (management cluster)", c.key.Cluster.Namespace, c.key.Cluster.Name, condValidProxyConfiguration),
	}
	return d, true
}

// The texts of HyperShift's proxy CA validation
// (hypershift-operator/controllers/hostedcluster/internal/proxy/validation.go).
const (
	msgNotYetValid = "is not yet valid:"   // l.61-62: NotBefore in the future
	msgNoLonger    = "was no longer valid" // l.64-65: expired
)

// proxyCAVerdict reads ValidProxyConfiguration's message, whose reason
// (ProxyCABundleInvalid) is the same for every failure: "missing" (the
// ConfigMap or its key), "unusable" (empty or not PEM), "not-yet-valid",
// "expired", or "" when the message says none of these.
func proxyCAVerdict(msg string) string {
	switch {
	case strings.Contains(msg, msgNotYetValid):
		return "not-yet-valid"
	case strings.Contains(msg, msgNoLonger):
		return "expired"
	case strings.Contains(msg, "not found"), strings.Contains(msg, "is missing \"ca-bundle.crt\""):
		return "missing"
	case strings.Contains(msg, "is empty from ConfigMap"), strings.Contains(msg, "failed parsing certificate data"):
		return "unusable"
	}
	return ""
}

// caEvidence describes the CA bundle without its contents.
func caEvidence(c *Cluster, ca *event.CABundle, now time.Time) Evidence {
	obj := "configmap/" + c.key.Cluster.Namespace + "/" + ca.ConfigMap
	at := c.hc.st.obs
	var text string
	switch {
	case !ca.Found:
		text = "not found"
	case ca.Problem != "":
		text = "unusable: " + withoutPEM(ca.Problem)
	default:
		text = fmt.Sprintf("%s; the first to expire is %q, notAfter %s", plural(ca.Certificates, "certificate", "certificates"), ca.Subject, ca.NotAfter.Format(time.RFC3339))
		if ca.NotAfter.Before(now) {
			text += " (expired)"
			at = ca.NotAfter
		}
	}
	return Evidence{At: at, Kind: "trusted-ca", Object: obj, Text: clip(text, maxEvidenceText)}
}

// kubevirtVMs: HyperShift reports the KubeVirt VMs of the hosted nodes
// not live-migratable, or the infra network's MTU too small; Pending
// virt-launcher pods are evidence of missing capacity.
func kubevirtVMs(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	d := Diagnosis{Severity: SeverityWarning}
	live := c.explainCond(&d, condLiveMigratable, x, isFalse)
	mtu := c.explainCond(&d, condInfraMTU, x, isFalse)
	rbac := c.explainCond(&d, condNetworkPolicyRBAC, x, isFalse)
	if !live && !mtu && !rbac {
		return Diagnosis{}, false
	}
	var pending []*entry[launcherRec]
	for _, e := range c.launchers.visible(!x.brief) {
		if e.rec.phase == "Pending" {
			pending = append(pending, e)
			d.Symptoms = append(d.Symptoms, "virtlauncher/"+e.rec.namespace+"/"+e.rec.pod)
		}
	}
	if x.brief {
		return d, true
	}
	var ev []Evidence
	for _, e := range pending {
		ev = append(ev, launcherEvidence(e))
	}
	d.Evidence = append(d.Evidence, capEvidence(ev, maxEvidencePerKind, "Pending virt-launcher pods")...)
	var what, why, check []string
	if live {
		what = append(what, "not live-migratable")
		why = append(why, "HyperShift reports VMs that cannot live-migrate, so draining their management node stops them")
		check = append(check, "the VMs' volumes (live migration needs ReadWriteMany storage)")
	}
	if mtu {
		what = append(what, "infra network MTU too small")
		why = append(why, "the infra network's MTU is too small for the hosted cluster's network")
		check = append(check, "the MTU of the management cluster's network")
	}
	var grant string
	if rbac {
		cd, _ := c.hcCond(condNetworkPolicyRBAC, isFalse)
		what = append(what, "tenant isolation weakened (infra RBAC)")
		if cd.Reason == "InfraClusterNetworkPolicyCreateFailed" {
			why = append(why, "the external infrastructure kubeconfig may not create or update NetworkPolicies in the infra namespace, so the virt-launcher NetworkPolicy that isolates the VMs is not kept in place")
			grant = "create, update, get, list and watch on networkpolicies.networking.k8s.io in the infra namespace"
		} else {
			why = append(why, "the external infrastructure kubeconfig may not read networks.config.openshift.io/cluster, so the virt-launcher NetworkPolicy was created without CIDR-based egress restrictions: weaker tenant isolation, not an outage")
			grant = "get on networks.config.openshift.io (a ClusterRole)"
		}
		check = append(check, "the RBAC of the infra cluster's service account ("+grant+")")
	}
	if len(pending) > 0 {
		what = append(what, plural(len(pending), "virt-launcher pod Pending", "virt-launcher pods Pending"))
		why = append(why, plural(len(pending), "virt-launcher pod is Pending, so its VM does not start", "virt-launcher pods are Pending, so their VMs do not start"))
		check = append([]string{"free CPU and memory on the management cluster for the Pending VMs"}, check...)
	}
	ns := c.controlPlaneNamespace()
	d.Title = fmt.Sprintf("KubeVirt VMs of %s: %s", c.label(), joinList(what, "and"))
	d.RootCause = fmt.Sprintf("For the KubeVirt VMs behind the nodes of %s, %s. Check %s in %s (management cluster).", c.key.Cluster, strings.Join(why, "; "), joinList(check, "and"), ns)
	d.Confidence = Confidence{ConfidenceMedium, "HyperShift's conditions and the pod phases are observed directly; the scheduler's and the storage's view the bot does not see"}
	d.NextSteps = []string{fmt.Sprintf("oc get vmi -n %s -o wide (management cluster)", ns)}
	if len(pending) > 0 {
		d.NextSteps = append(d.NextSteps,
			fmt.Sprintf("oc describe pod -n %s %s (management cluster): the events say Insufficient cpu/memory or an unbound volume", pending[0].rec.namespace, pending[0].rec.pod))
	}
	if live {
		d.NextSteps = append(d.NextSteps,
			fmt.Sprintf("oc get pvc -n %s -o custom-columns=NAME:.metadata.name,MODES:.spec.accessModes,CLASS:.spec.storageClassName (management cluster): live migration needs ReadWriteMany", ns),
			fmt.Sprintf("oc get vmi -n %s -o jsonpath='{range .items[*]}{.metadata.name}{\"\\t\"}{.status.conditions[?(@.type==\"LiveMigratable\")].message}{\"\\n\"}{end}' (management cluster)", ns))
	}
	if rbac {
		d.NextSteps = append(d.NextSteps,
			"Grant the infra service account of the external infrastructure kubeconfig "+grant+" (infrastructure cluster); HyperShift retries on its next reconcile.",
			fmt.Sprintf("On the infrastructure cluster (not the management cluster), run oc get events -n <infra namespace> --field-selector involvedObject.name=virt-launcher-netpol-rbac-%s for HyperShift's warning with the API error", firstNonEmpty(c.hc.p.InfraID, "<infraID>")))
	}
	if mtu {
		d.NextSteps = append(d.NextSteps, "oc get network.config cluster -o jsonpath='{.status.clusterNetworkMTU}' (management cluster): the hosted cluster's network needs room for its overlay inside it")
	}
	return d, true
}
