"""Notification: a notifier fanned out over the pods a label selector matches."""
