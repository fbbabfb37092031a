"""Delegated authorization: request attributes and SubjectAccessReview."""
