"""`kubectl notify`: a kubectl plugin for container-notifier (notifier.x-k8s.io/v1alpha1).

Modules by concern: `cli` parses the command line into typed commands, `kubeconfig` finds
the cluster, user and namespace the way kubectl does, `api` holds the requests the plugin
makes, `commands` (notify, fanout, listing, access) runs each command, `output` formats
results, `selectors` turns a label-selector string into a LabelSelector, `completion` answers
shell completion. `__main__.main` is the `kubectl-notify` console script.
"""
