"""File access below the ``Dataset`` facade: the file-system shim (``fs``: local paths and fsspec URLs, atomic
writes), input streams of (decompressed) bytes (``streams``), TFRecord framing (``framing``) and
``TFRecordWriter`` (``tfrecord_writer``). ``Dataset.list_files``, ``save`` and ``load`` and the readers of
``headrace.io`` (which re-exports ``fs`` as ``headrace.io.files`` and the writer as ``headrace.io.TFRecordWriter``)
all use them; nothing here imports the facade or anything above it."""
