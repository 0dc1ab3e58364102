"""The pure core: values, routing, context and its budget, tokens, prompts, the wire format,
agent specs, the model seam, markers. It imports no I/O library and nothing outside ``core``."""
