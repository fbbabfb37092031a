"""Certificate tooling for container-notifier: CAs, serving and client certificates."""
