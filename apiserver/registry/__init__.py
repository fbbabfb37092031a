"""Storage for notifier objects with Kubernetes semantics.

``store.ObjectStore`` is the generic interface a backend implements (create, get, list, watch,
guaranteed_update, delete, delete_collection; one resourceVersion counter, preconditions,
continue tokens, 410 for compacted history); ``resources`` says per resource what is
selectable and indexed; ``podnotifiers.PodNotifierStore`` layers the PodNotifier rules (per-pod
bound, TTL expiry, unfinished records) over any backend, deciding 409/429 among the records
created before (``store.Cohort.admit``) so that they hold across replicas.
``SqliteObjectStore`` on a
``SqliteDatabase`` is the embedded backend. Errors are ``StoreError`` kinds of the
``apiserver.errors`` hierarchy; storage failures are ``StorageUnavailable`` (503).
"""
