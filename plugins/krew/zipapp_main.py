"""The entry point of the kubectl-notify zipapp in the krew archive (hack/release.py writes it as
the archive's __main__.py): the plugin and its pure-Python dependencies run from the zip."""

import sys

if sys.version_info < (3, 11):  # noqa: UP036  (any python3 on PATH may run the zipapp)
    sys.exit(f"error: kubectl notify needs Python 3.11 or later; this python3 is "
             f"{sys.version.split()[0]} ({sys.executable})")

from kubectl_notify.__main__ import main  # noqa: E402  (after the version check)

sys.exit(main())
