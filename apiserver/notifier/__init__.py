"""Running notifiers in containers through the kube-apiserver's ``pods/exec``."""
