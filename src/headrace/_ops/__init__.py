"""One module per transformation; each holds a ``Dataset`` node and its private iterator."""
