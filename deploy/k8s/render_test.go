package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to the typed struct an object of that kind is decoded into.
// A kind that is not here fails the test: add it (with its k8s.io/api type) when a
// manifest needs it.
var kinds = map[string]func() any{
	"v1/Namespace":                       func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                          func() any { return &corev1.Secret{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                  func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                       func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

// rendering is the output of one kustomization, every object decoded into its type.
type rendering struct {
	dir     string // the kustomization directory, relative to deploy/k8s
	objects []any
	// secret is the kustomization's secret.template.yaml: the Secret the manifests
	// reference, with placeholder values. It is not part of the rendering.
	secret *corev1.Secret
}

// kustomizations lists every directory under deploy/k8s holding a kustomization.yaml:
// the base and each overlay.
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch d.Name() {
		case "kustomization.yaml", "kustomization.yml", "Kustomization":
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, dirs, "base")
	require.GreaterOrEqual(t, len(dirs), 2, "want the base and at least one overlay, found %v", dirs)
	return dirs
}

// render builds the kustomization in dir offline, as `kubectl kustomize dir` would, and
// decodes every object strictly into its k8s.io/api type.
func render(t *testing.T, dir string) *rendering {
	t.Helper()
	abs, err := filepath.Abs(dir)
	require.NoError(t, err)
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	require.NoError(t, err, "kustomize build %s", dir)
	r := &rendering{dir: dir}
	for _, res := range resMap.Resources() {
		y, err := res.AsYAML()
		require.NoError(t, err)
		obj, err := decodeStrict(y)
		require.NoError(t, err, "%s: %s %s", dir, res.GetKind(), res.GetName())
		r.objects = append(r.objects, obj)
	}
	tmpl := filepath.Join(dir, "secret.template.yaml")
	y, err := os.ReadFile(tmpl)
	require.NoError(t, err, "every kustomization needs a secret.template.yaml with the keys its manifests reference")
	obj, err := decodeStrict(y)
	require.NoError(t, err, tmpl)
	s, ok := obj.(*corev1.Secret)
	require.True(t, ok, "%s holds a %T, want a Secret", tmpl, obj)
	r.secret = s
	return r
}

// decodeStrict decodes one YAML object into the k8s.io/api type of its kind: an unknown
// field is an error, and so is a field the type does not keep exactly as written (Go's
// encoding/json matches names case-insensitively; the round trip catches that).
func decodeStrict(y []byte) (any, error) {
	js, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, err
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, err
	}
	newObj, ok := kinds[head.APIVersion+"/"+head.Kind]
	if !ok {
		return nil, fmt.Errorf("no decoder for %s %s: add its k8s.io/api type to kinds", head.APIVersion, head.Kind)
	}
	obj := newObj()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", head.APIVersion, head.Kind, err)
	}
	back, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var in, out any
	if err := json.Unmarshal(js, &in); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(back, &out); err != nil {
		return nil, err
	}
	if path, ok := kept(in, out, ""); !ok {
		return nil, fmt.Errorf("%s %s: field %s is not kept by the API type (wrong case, type or format?)", head.APIVersion, head.Kind, path)
	}
	return obj, nil
}

// kept reports whether every field and value of in is also in out, and the first path
// where it is not.
func kept(in, out any, path string) (string, bool) {
	switch in := in.(type) {
	case nil:
		return "", true
	case map[string]any:
		o, ok := out.(map[string]any)
		if !ok {
			return path, len(in) == 0
		}
		keys := make([]string, 0, len(in))
		for k := range in {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if in[k] == nil {
				continue
			}
			ov, ok := o[k]
			if !ok {
				if m, isMap := in[k].(map[string]any); isMap && len(m) == 0 {
					continue // an empty object the type omits
				}
				return path + "." + k, false
			}
			if p, ok := kept(in[k], ov, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		o, ok := out.([]any)
		if !ok || len(o) != len(in) {
			return path, false
		}
		for i := range in {
			if p, ok := kept(in[i], o[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		return path, reflect.DeepEqual(in, out)
	}
}

// Typed views of a rendering.

func objectsOf[T any](r *rendering) []T {
	var out []T
	for _, o := range r.objects {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func (r *rendering) configMap(namespace, name string) *corev1.ConfigMap {
	for _, cm := range objectsOf[*corev1.ConfigMap](r) {
		if cm.Name == name && cm.Namespace == namespace {
			return cm
		}
	}
	return nil
}

// secretValue is what the environment variable fed from ref would hold: the template's
// placeholder.
func (r *rendering) secretValue(ref *corev1.SecretKeySelector) (string, bool) {
	if ref.Name != r.secret.Name {
		return "", false
	}
	if v, ok := r.secret.StringData[ref.Key]; ok {
		return v, true
	}
	v, ok := r.secret.Data[ref.Key]
	return string(v), ok
}

func yamlUnmarshal(data string, into any) error { return yaml.Unmarshal([]byte(data), into) }
