"""The local Apache Kafka broker used by the demo and the tests."""
