"""What an agent sees at a turn, within its budget: the context built from its layers (``build``),
the labelled conversation (``transcript``), the references block (``references``), the token
budget (``budget``, its values in ``plan``, the degradation steps in ``degrade``) and token
counting (``tokens``)."""
