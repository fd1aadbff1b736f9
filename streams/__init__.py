"""The Kafka edges of the pipeline: the Faust worker and the action consumer.

Only this package (and the collectors' publisher) imports Kafka clients.
The logic it runs is pure and lives in `detectors` and `actions`; here we
decode, route, and send.
"""
