"""`trainguard act`: the Kafka edge of the action consumer.

Built by `factory.create_action_app`; the consume loop feeds records to
`actions.core.ActCore`, the command bus signs and sends commands, the state
mirror keeps the journal on a compacted topic, and the Lease elects a leader.
"""
