"""The local control plane: etcd, kube-apiserver, controller-manager, scheduler and kwok.

Run as `python -m localcluster up|down|status` with `hack/` on PYTHONPATH (the Makefile does).
"""
