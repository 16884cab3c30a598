"""tf.train.Example protobuf messages (see example.proto), built without protoc."""
