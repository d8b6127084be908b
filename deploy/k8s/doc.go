// Package k8s holds the tests of rocketdelay's container image (../../Dockerfile) and of
// its Kubernetes manifests (the kustomize base and overlays in this directory). It is a
// module of its own so that k8s.io/api and sigs.k8s.io/kustomize stay out of the
// service's go.mod; it has no code besides the tests.
package k8s
