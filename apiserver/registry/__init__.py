"""Storage for notifier objects with Kubernetes semantics.

``ObjectStore`` (``store``) is the interface; ``SqliteObjectStore`` on a ``SqliteDatabase`` is
the embedded implementation. Errors are ``StoreError`` subclasses that know their
``metav1.Status``.
"""
