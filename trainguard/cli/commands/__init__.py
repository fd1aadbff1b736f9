"""One module per `trainguard` subcommand, each with `register(subparsers)`."""
