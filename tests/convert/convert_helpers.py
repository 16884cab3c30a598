"""Small source datasets with known contents (and known bad rows) for the converter's tests."""

from __future__ import annotations

import json
from pathlib import Path

IN_PROCESS = ["direct_running_mode=in_memory", "direct_num_workers=1"]
"""Beam options for the fast single-process DirectRunner used by most tests."""


def image_folder(root: Path, n: int = 24, broken: bool = True) -> dict[str, int]:
    """``n`` real-photo JPEGs (64 x 48) in class folders plus, with ``broken``, one truncated JPEG
    (``camera/broken.jpg``) and one PNG. Returns ``{relative path: label}`` of the good images."""
    import cv2
    import numpy as np

    from headrace.image.photos import PHOTO_CLASSES, make_photo_jpegs

    made = make_photo_jpegs(root, n, size=(64, 48), seed=1)
    good = {Path(p).relative_to(root).as_posix(): label for p, label in made}
    png = root / "coins" / "extra.png"
    cv2.imwrite(str(png), np.full((20, 30, 3), 128, np.uint8))
    good["coins/extra.png"] = PHOTO_CLASSES.index("coins")
    if broken:
        data = Path(made[1][0]).read_bytes()
        (root / "camera" / "broken.jpg").write_bytes(data[: len(data) // 3])
    return good


CSV_TEXT = """id,name,score,tags
1,alpha,0.5,x
2,beta,1.5,
3,"gamma, the third",2,z
4,delta
5,"two
lines",abc,y
6,zeta,3,w
"""
"""Line 5 has too few fields (rejected); the record of line 6 spans two lines; ``score`` is a string column
because of ``abc``; ``tags`` is missing on line 3."""
CSV_IDS = ["2", "3", "4", "6", "8"]


def csv_file(path: Path) -> Path:
    path.write_text(CSV_TEXT)
    return path


def jsonl_file(path: Path) -> Path:
    lines = [json.dumps({"id": 1, "label": 0, "x": [1.0, 2.0], "name": "a"}),
             json.dumps({"id": 2, "label": 1, "x": [3, 4], "name": None}),
             "{not json",
             "",
             json.dumps({"id": 4, "label": 1, "x": [5.5, 6.5], "nested": {"a": 1}}),
             json.dumps([1, 2]),
             json.dumps({"id": 6, "label": 0, "x": [7.0, 8.0], "name": "f"})]
    path.write_text("\n".join(lines) + "\n")
    return path
