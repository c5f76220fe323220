"""A real kube-apiserver + etcd on loopback for tests (no Docker), like controller-runtime's envtest.

* ``build.sh`` builds the binaries from the Go module proxy into ``${AI4DL_CACHE:-~/.cache/ai4dl}/bin``.
* :mod:`e2e.controlplane.cluster` starts them (:class:`~e2e.controlplane.cluster.ControlPlane`)
  and has a CLI: ``python -m e2e.controlplane.cluster up``.
"""
