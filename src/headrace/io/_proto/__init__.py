"""tf.train.Example protobuf messages, built from the descriptor in :mod:`.messages` (the one definition
of the schema; no ``.proto`` file, no protoc)."""
