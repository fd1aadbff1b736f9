"""`trainguard alerts`: incidents and decisions to Alertmanager and Slack-style webhooks."""
