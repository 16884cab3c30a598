"""The engine: the recipe, the stages' runtime, replay, and the helpers stages share."""
