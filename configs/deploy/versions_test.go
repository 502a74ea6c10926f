package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/hcpbot/hcpbot/internal/version"
)

// releaseTag is the release this tree builds (internal/version/RELEASE),
// the tag of the hcpbot image.
func releaseTag(t *testing.T) string {
	t.Helper()
	r := version.Release()
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(r) {
		t.Fatalf("internal/version/RELEASE %q is not a release version (vMAJOR.MINOR.PATCH)", r)
	}
	return r
}

// Versions are pinned, and pinned together: the hcpbot image of both
// Deployments is tagged with the release (never latest or untagged), the
// Makefile stamps and tags that same release, and the NATS image is the
// nats-server release of go.mod, which the tests embed and run.
func TestVersionsPinned(t *testing.T) {
	release := releaseTag(t)
	for _, dir := range []string{"agent", "bot"} {
		for _, o := range render(t, dir) {
			if o.GetKind() != "Deployment" {
				continue
			}
			d := as[appsv1.Deployment](t, o)
			for _, c := range d.Spec.Template.Spec.Containers {
				if want := "ghcr.io/hcpbot/hcpbot:" + release; c.Image != want {
					t.Errorf("%s: Deployment %s container %s: image %q, want %q (internal/version/RELEASE)", dir, d.Name, c.Name, c.Image, want)
				}
			}
		}
	}

	// The Makefile builds and tags what the kustomizations pin.
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	for target, want := range map[string][]string{
		"build": {"internal/version.Version=" + release + " "},
		"image": {"--build-arg VERSION=" + release + " ", "-t ghcr.io/hcpbot/hcpbot:" + release + " "},
	} {
		cmd := exec.Command("make", "--no-print-directory", "-n", target)
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("make %s does not use the release %s (%q):\n%s", target, release, w, out)
			}
		}
	}
}

// The NATS servers of the deploy run the nats-server release of go.mod.
func TestNATSVersionPinned(t *testing.T) {
	f, err := os.Open("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mod string
	for s := bufio.NewScanner(f); s.Scan(); {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(s.Text()), "require "))
		if len(fields) >= 2 && fields[0] == "github.com/nats-io/nats-server/v2" {
			mod = fields[1]
		}
	}
	if mod != "v"+natsserver.VERSION {
		t.Errorf("go.mod requires nats-server %q, the build embeds %s", mod, natsserver.VERSION)
	}
	sts := as[appsv1.StatefulSet](t, find(t, render(t, "nats"), "StatefulSet", "nats"))
	if img, want := sts.Spec.Template.Spec.Containers[0].Image, "nats:"+strings.TrimPrefix(mod, "v")+"-alpine"; img != want {
		t.Errorf("NATS image %q, want %q (go.mod's nats-server)", img, want)
	}
}
