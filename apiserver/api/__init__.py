"""The notifier.x-k8s.io/v1alpha1 API surface: types, discovery, OpenAPI, errors."""
