"""Delegated authentication: front-proxy headers, x509 client certificates, TokenReview."""
