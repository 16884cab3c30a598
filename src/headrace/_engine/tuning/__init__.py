"""AUTOTUNE (knobs, the tuner, starting values), explain(), and the static optimizations."""
