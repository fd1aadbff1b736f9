"""The Kafka edges of the pipeline, one room per service.

`worker/` (the Faust detection worker), `act/` (the action consumer),
`console/` (the operator web console) and `alerts/` (the alert router);
the edge they share stays here: `kafka_io`, `admin`, `recording`, `settings`.
Only this package (and the collectors' publisher and command feed) imports
Kafka clients. The logic it runs is pure and lives in `detectors` and
`actions`; here we decode, route, and send.
"""
