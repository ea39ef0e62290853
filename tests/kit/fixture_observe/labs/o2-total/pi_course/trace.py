"""A fixed trace to observe: the observation fixture's teaching file (nothing to implement)."""


def steps() -> list[int]:
    """The step numbers of the trace, counted from one."""
    return list(range(1, 4))
