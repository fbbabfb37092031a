"""container-notifier: an aggregated Kubernetes API server for notifier.x-k8s.io/v1alpha1."""
