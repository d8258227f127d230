// Package kubecheck keeps the Kubernetes manifests in docs/kubernetes valid:
// it renders the kustomize base as kubectl would and decodes every object
// strictly into the Kubernetes API types (an unknown or misspelled field
// fails). Its own module, so the service's go.mod does not carry the
// Kubernetes client types.
package kubecheck

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite docs/kubernetes/prometheusrule.yaml from docs/ops/alerts.yml")

const base = "../../docs/kubernetes"

func TestManifests(t *testing.T) {
	if *update {
		writeRule(t)
	}
	out, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), base)
	require.NoError(t, err, "kustomize build docs/kubernetes")
	rendered, err := out.AsYaml()
	require.NoError(t, err)

	var (
		deploy  appsv1.Deployment
		job     batchv1.Job
		svc     corev1.Service
		secret  corev1.Secret
		pdb     policyv1.PodDisruptionBudget
		monitor monitoringv1.ServiceMonitor
		rule    monitoringv1.PrometheusRule
	)
	kinds := map[string]any{"Deployment": &deploy, "Job": &job, "Service": &svc, "Secret": &secret,
		"PodDisruptionBudget": &pdb, "ServiceMonitor": &monitor, "PrometheusRule": &rule}
	seen := map[string]bool{}
	for _, doc := range bytes.Split(rendered, []byte("\n---\n")) {
		var head struct{ Kind string }
		require.NoError(t, yaml.Unmarshal(doc, &head))
		into, ok := kinds[head.Kind]
		require.True(t, ok, "unexpected kind %q", head.Kind)
		require.NoError(t, yaml.UnmarshalStrict(doc, into), "%s:\n%s", head.Kind, doc)
		require.False(t, seen[head.Kind], "two %s", head.Kind)
		seen[head.Kind] = true
	}
	require.Len(t, seen, len(kinds))

	// The Deployment: its selector matches its pods, probes on /readyz and
	// /healthz, a grace period above the 60 s long poll, config from the
	// Secret, not root.
	require.GreaterOrEqual(t, *deploy.Spec.Replicas, int32(2))
	require.NotNil(t, deploy.Spec.Selector)
	for k, v := range deploy.Spec.Selector.MatchLabels {
		require.Equal(t, v, deploy.Spec.Template.Labels[k], "the selector matches the pod template")
	}
	pod := deploy.Spec.Template.Spec
	require.Greater(t, *pod.TerminationGracePeriodSeconds, int64(60))
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, secret.Name, c.EnvFrom[0].SecretRef.Name)
	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.Equal(t, []string{"migrate", "up"}, job.Spec.Template.Spec.Containers[0].Args)
	require.Equal(t, secret.Name, job.Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name)

	// The Service, the budget and the monitor select the Deployment's pods.
	for _, sel := range []map[string]string{svc.Spec.Selector, pdb.Spec.Selector.MatchLabels, monitor.Spec.Selector.MatchLabels} {
		require.NotEmpty(t, sel)
		for k, v := range sel {
			require.Equal(t, v, deploy.Spec.Template.Labels[k])
		}
	}
	require.Equal(t, "http", monitor.Spec.Endpoints[0].Port)
	require.Equal(t, "/metrics", monitor.Spec.Endpoints[0].Path)

	// The PrometheusRule is docs/ops/alerts.yml (go test -update rewrites it).
	var alerts monitoringv1.PrometheusRuleSpec
	raw, err := os.ReadFile("../../docs/ops/alerts.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, &alerts))
	require.NotEmpty(t, alerts.Groups)
	require.Equal(t, alerts, rule.Spec, "prometheusrule.yaml differs from docs/ops/alerts.yml: go test ./... -update in scripts/kubecheck")
}

// writeRule wraps docs/ops/alerts.yml's groups into a PrometheusRule.
func writeRule(t *testing.T) {
	raw, err := os.ReadFile("../../docs/ops/alerts.yml")
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString("# Generated from docs/ops/alerts.yml by `go test ./... -update` in scripts/kubecheck;\n")
	b.WriteString("# edit alerts.yml, not this file.\n")
	b.WriteString("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: task-service\nspec:\n")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("  " + line + "\n")
	}
	require.NoError(t, os.WriteFile(filepath.Join(base, "prometheusrule.yaml"), []byte(strings.TrimRight(b.String(), "\n")+"\n"), 0o644))
}
