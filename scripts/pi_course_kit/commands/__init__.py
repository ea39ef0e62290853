"""One module per `pi-course` command; each has `add_arguments(parser)` and `run(args) -> int`."""
