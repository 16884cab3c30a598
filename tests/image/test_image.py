"""headrace.image: decoding (against pixels TensorFlow decoded), resizing (against TF's formula), crops."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image

from headrace import ImageDecodeError
from headrace import image as himg

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tfrecord"


def _photo(h: int = 96, w: int = 128, seed: int = 0, blob: int = 8) -> np.ndarray:
    """A smooth, photo-like RGB image (JPEG-friendly) with features of ``blob`` px, uint8 H x W x 3."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // blob + 1, w // blob + 1, 3), dtype=np.uint8)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def _encode(arr: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt)
    return buf.getvalue()


# ---- reference implementations of TensorFlow's resize kernels (half_pixel_centers=True) --------------------
def _tf_bilinear(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """tensorflow/core/kernels/image/resize_bilinear_op.cc, compute_interpolation_weights + lerp."""
    x = img.astype(np.float64)

    def weights(out: int, inn: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = (np.arange(out) + 0.5) * (inn / out) - 0.5
        lower = np.maximum(np.floor(pos), 0).astype(int)
        upper = np.minimum(np.ceil(pos), inn - 1).astype(int)
        return lower, upper, pos - np.floor(pos)

    ylo, yhi, ylerp = weights(out_h, img.shape[0])
    xlo, xhi, xlerp = weights(out_w, img.shape[1])
    xl = xlerp[None, :, None]
    top = x[ylo][:, xlo] + (x[ylo][:, xhi] - x[ylo][:, xlo]) * xl
    bottom = x[yhi][:, xlo] + (x[yhi][:, xhi] - x[yhi][:, xlo]) * xl
    return top + (bottom - top) * ylerp[:, None, None]


def _tf_nearest(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """resize_nearest_neighbor_op.cc, half-pixel: min(floor((o + 0.5f) * scale), in - 1) in float32."""
    def index(out: int, inn: int) -> list[int]:
        scale = np.float32(inn) / np.float32(out)  # CalculateResizeScale: float division
        return [min(int(np.floor(np.float32(np.float32(o) + np.float32(0.5)) * scale)), inn - 1)
                for o in range(out)]

    return img[index(out_h, img.shape[0])][:, index(out_w, img.shape[1])]


SIZES = [((37, 53), (224, 224)), ((375, 500), (224, 224)), ((64, 64), (32, 32)), ((50, 80), (17, 31)),
         ((9, 7), (20, 3)), ((128, 96), (128, 40))]


# ---- decode ------------------------------------------------------------------------------------------------
def test_decode_jpeg_is_byte_identical_to_tensorflow() -> None:
    expected = json.loads((FIXTURES / "examples.expected.json").read_text())["examples"]
    for ex in expected:
        data = base64.b64decode(ex["image/encoded"]["b64"])
        img = himg.decode(data)
        assert list(img.shape) == ex["decoded_image_shape"] and img.dtype == np.uint8
        assert hashlib.sha256(img.tobytes()).hexdigest() == ex["decoded_image_sha256"]
        assert img.mean() == pytest.approx(ex["decoded_image_mean"], abs=1e-3)


def test_decode_jpeg_channels() -> None:
    rgb = _photo()
    data = simplejpeg.encode_jpeg(rgb, quality=95)
    full = himg.decode(data)
    assert full.shape == (96, 128, 3) and np.abs(full.astype(int) - rgb).mean() < 3
    assert himg.decode(data, channels=0).shape == (96, 128, 3)
    grey = himg.decode(data, channels=1)
    assert grey.shape == (96, 128, 1)
    rgba = himg.decode(data, channels=4)
    assert rgba.shape == (96, 128, 4) and (rgba[..., 3] == 255).all()
    np.testing.assert_array_equal(rgba[..., :3], full)
    # a greyscale JPEG: as stored -> 1 channel, RGB -> the grey value replicated
    gdata = simplejpeg.encode_jpeg(np.ascontiguousarray(rgb[:, :, :1]), colorspace="GRAY")
    g0 = himg.decode(gdata, channels=0)
    assert g0.shape == (96, 128, 1)
    g3 = himg.decode(gdata, channels=3)
    np.testing.assert_array_equal(g3, np.repeat(g0, 3, axis=2))


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "WEBP"])
def test_decode_lossless_formats_exact(fmt: str) -> None:
    rgb = _photo(40, 30)
    data = _encode(rgb, fmt) if fmt != "WEBP" else cv2.imencode(".webp", rgb[:, :, ::-1],
                                                                 [cv2.IMWRITE_WEBP_QUALITY, 101])[1].tobytes()
    np.testing.assert_array_equal(himg.decode(data), rgb)
    np.testing.assert_array_equal(himg.decode(data, channels=4)[..., :3], rgb)


def test_decode_png_alpha_grey_and_16bit() -> None:
    rgba = np.dstack([_photo(20, 24), np.arange(20 * 24, dtype=np.uint8).reshape(20, 24, 1)])
    data = _encode(rgba, "PNG")
    np.testing.assert_array_equal(himg.decode(data, channels=0), rgba)
    np.testing.assert_array_equal(himg.decode(data, channels=3), rgba[..., :3])  # alpha dropped, as TF
    grey = _photo(20, 24)[..., 0]
    g = himg.decode(_encode(grey, "PNG"), channels=0)
    np.testing.assert_array_equal(g, grey[..., None])
    np.testing.assert_array_equal(himg.decode(_encode(grey, "PNG"), channels=3), np.repeat(g, 3, axis=2))
    deep = (np.arange(12 * 10, dtype=np.uint16) * 541).reshape(12, 10)
    png16 = cv2.imencode(".png", deep)[1].tobytes()
    np.testing.assert_array_equal(himg.decode(png16, channels=1)[..., 0], (deep >> 8).astype(np.uint8))


def test_decode_gif_first_frame() -> None:
    rgb = np.zeros((16, 12, 3), np.uint8)
    rgb[:, :6] = (255, 0, 0)
    rgb[:, 6:] = (0, 0, 255)
    img = himg.decode(_encode(rgb, "GIF"))
    np.testing.assert_array_equal(img, rgb)


def test_decode_accepts_buffers() -> None:
    data = _encode(_photo(8, 8), "PNG")
    ref = himg.decode(data)
    for form in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8), np.bytes_(data),
                 np.array(data, dtype=object)):
        np.testing.assert_array_equal(himg.decode(form), ref)
    with pytest.raises(TypeError, match="expected the encoded image as bytes"):
        himg.decode("not bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize("make_bad", [
    lambda jpg, png: jpg[: len(jpg) // 2],                 # truncated JPEG
    lambda jpg, png: jpg[:3] + b"garbage" * 20,             # JPEG magic, garbage header
    lambda jpg, png: png[: len(png) // 2],                  # truncated PNG
    lambda jpg, png: png[:40] + bytes(b ^ 0xFF for b in png[40:60]) + png[60:],  # PNG data CRC fails
    lambda jpg, png: b"this is not an image at all",
    lambda jpg, png: b"",
])
def test_decode_corrupt_raises_naming_the_file(make_bad) -> None:  # type: ignore[no-untyped-def]
    rgb = _photo(64, 64)
    bad = make_bad(simplejpeg.encode_jpeg(rgb), _encode(rgb, "PNG"))
    with pytest.raises(ImageDecodeError, match=r"cats/0042\.jpg.*ignore_errors"):
        himg.decode(bad, name="cats/0042.jpg")
    with pytest.raises(ImageDecodeError, match=r"cats/0042\.jpg"):
        himg.decode_and_resize(bad, (16, 16), name="cats/0042.jpg")
    with pytest.raises(ImageDecodeError, match="record"):
        himg.decode(bad)


def test_python_jpeg_header_walk_agrees_with_libjpeg() -> None:
    rgb = _photo(30, 44)
    cmyk = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(cmyk, "JPEG", quality=95)
    exif = Image.Exif()
    exif[0x010E] = "x" * 3000  # a large APP1 segment before the frame header
    with_exif = io.BytesIO()
    Image.fromarray(rgb).save(with_exif, "JPEG", exif=exif)
    samples = [simplejpeg.encode_jpeg(rgb), cv2.imencode(".jpg", rgb, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes(),
               simplejpeg.encode_jpeg(np.ascontiguousarray(rgb[:, :, :1]), colorspace="GRAY"), cmyk.getvalue(),
               with_exif.getvalue()]
    for data in samples:
        h, w, space, _ = simplejpeg.decode_jpeg_header(data)
        assert himg._sof(data) == (h, w, "CMYK" if space == "YCCK" else space)
    rgb_from_cmyk = himg.decode(cmyk.getvalue())  # CMYK goes through OpenCV
    assert rgb_from_cmyk.shape == (30, 44, 3) and np.abs(rgb_from_cmyk.astype(int) - rgb).mean() < 8
    assert himg._sof(samples[0][:40]) is None  # cut before the frame header: libjpeg reports the error


def test_decode_bad_channels() -> None:
    with pytest.raises(ValueError, match="channels=2"):
        himg.decode(b"\xff\xd8\xff", channels=2)


# ---- resize ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("src", "dst"), SIZES)
def test_resize_bilinear_matches_tensorflow_formula(src: tuple[int, int], dst: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(src) + sum(dst))
    img8 = rng.integers(0, 256, (*src, 3), dtype=np.uint8)
    ref = _tf_bilinear(img8, *dst)
    f32 = himg.resize(img8.astype(np.float32), dst)
    assert f32.shape == (*dst, 3) and f32.dtype == np.float32
    assert np.abs(f32 - ref).max() <= 1e-3
    u8 = himg.resize(img8, dst)
    assert u8.shape == (*dst, 3) and u8.dtype == np.uint8
    diff = np.abs(u8.astype(np.float64) - ref)
    assert diff.max() <= 1.0 and diff.mean() < 0.3


@pytest.mark.parametrize(("src", "dst"), SIZES)
def test_resize_nearest_matches_tensorflow_formula(src: tuple[int, int], dst: tuple[int, int]) -> None:
    img = np.random.default_rng(1).integers(0, 256, (*src, 2), dtype=np.uint8)
    np.testing.assert_array_equal(himg.resize(img, dst, method="nearest"), _tf_nearest(img, *dst))


def test_resize_area_is_block_mean_for_integer_factors() -> None:
    img = np.random.default_rng(2).random((60, 90, 3)).astype(np.float32) * 255
    out = himg.resize(img, (20, 30), method="area")
    ref = img.reshape(20, 3, 30, 3, 3).mean(axis=(1, 3))
    assert np.abs(out - ref).max() <= 1e-3


def test_resize_shapes_and_dtypes() -> None:
    grey = np.random.default_rng(3).integers(0, 256, (10, 12), dtype=np.uint8)
    assert himg.resize(grey, (5, 6)).shape == (5, 6)
    assert himg.resize(grey[..., None], (5, 6)).shape == (5, 6, 1)
    batch = np.stack([_photo(32, 32, seed=s) for s in range(3)])
    out = himg.resize(batch, (16, 8))
    assert out.shape == (3, 16, 8, 3)
    np.testing.assert_array_equal(out[1], himg.resize(batch[1], (16, 8)))
    assert himg.resize(grey.astype(np.int64), (5, 6)).dtype == np.float32
    assert himg.resize(grey.astype(np.float64), (5, 6)).dtype == np.float64
    np.testing.assert_array_equal(himg.resize(grey, (10, 12)), grey)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"size": (0, 5)}, "size=.*two ints >= 1"),
    ({"size": (5,)}, "size="),
    ({"size": (5, 5), "method": "bicubic"}, "method='bicubic'"),
    ({"size": (5, 5), "antialias": True}, "antialias=True"),
])
def test_resize_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        himg.resize(np.zeros((8, 8, 3), np.uint8), **kwargs)


def test_resize_bad_rank() -> None:
    with pytest.raises(ValueError, match="shape"):
        himg.resize(np.zeros((2, 2, 2, 2, 2), np.uint8), (1, 1))


# ---- decode_and_resize -------------------------------------------------------------------------------------
def test_decode_and_resize_without_dct_scaling_is_decode_then_resize() -> None:
    data = simplejpeg.encode_jpeg(_photo(300, 400), quality=90)
    exact = himg.decode_and_resize(data, (64, 80), dct_scaling=False)
    np.testing.assert_array_equal(exact, himg.resize(himg.decode(data), (64, 80)))
    png = _encode(_photo(30, 40), "PNG")
    np.testing.assert_array_equal(himg.decode_and_resize(png, (7, 9), channels=1),
                                  himg.resize(himg.decode(png, channels=1), (7, 9)))


def test_decode_and_resize_dct_scaling_close_to_full_decode() -> None:
    data = simplejpeg.encode_jpeg(_photo(480, 640, blob=48), quality=90)
    fast = himg.decode_and_resize(data, (112, 150))
    exact = himg.decode_and_resize(data, (112, 150), dct_scaling=False)
    assert fast.shape == exact.shape == (112, 150, 3)
    assert np.abs(fast.astype(int) - exact).mean() < 2.0
    # the DCT-scaled decode is libjpeg's 1/4 scale (480x640 -> 120x160 >= 112x150)
    quarter = simplejpeg.decode_jpeg(data, fastdct=True, min_height=120, min_width=160, min_factor=4)
    assert quarter.shape == (120, 160, 3)
    np.testing.assert_array_equal(fast, himg.resize(quarter, (112, 150)))


@pytest.mark.parametrize(("src", "dst", "factor"), [
    ((375, 500), (224, 224), 1), ((480, 640), (224, 224), 2), ((1000, 1000), (224, 224), 4),
    ((2000, 3000), (224, 224), 8), ((447, 1000), (224, 224), 2), ((446, 1000), (224, 224), 1),
])
def test_dct_factor_only_when_source_at_least_twice_the_target(src, dst, factor) -> None:  # type: ignore[no-untyped-def]
    assert himg._dct_factor(src, dst) == factor


# ---- normalize, crops, flips -------------------------------------------------------------------------------
def test_normalize() -> None:
    img = _photo(8, 8)
    np.testing.assert_array_equal(himg.normalize(img), img.astype(np.float32) / np.float32(255))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = himg.normalize(img, mean, std)
    ref = (img.astype(np.float64) / 255 - np.array(mean)) / np.array(std)
    assert out.dtype == np.float32 and np.abs(out - ref).max() < 1e-5
    with pytest.raises(ValueError, match=r"std=.*contains 0"):
        himg.normalize(img, std=(1, 0, 1))
    with pytest.raises(ValueError, match="max_value"):
        himg.normalize(img, max_value=0)


def test_center_crop() -> None:
    img = np.arange(7 * 9 * 2).reshape(7, 9, 2)
    out = himg.center_crop(img, (3, 4))
    np.testing.assert_array_equal(out, img[2:5, 2:6])
    assert out.flags.c_contiguous and not np.shares_memory(out, img)
    with pytest.raises(ValueError, match="smaller than the crop 8x4"):
        himg.center_crop(img, (8, 4))


def test_random_crop_seeded_and_uniform() -> None:
    img = np.arange(10 * 10).reshape(10, 10)
    a = himg.random_crop(img, (4, 3), seed=7)
    np.testing.assert_array_equal(a, himg.random_crop(img, (4, 3), seed=7))
    tops = set()
    for s in range(200):
        c = himg.random_crop(img, (4, 3), seed=(1, s))
        top, left = divmod(int(c[0, 0]), 10)
        np.testing.assert_array_equal(c, img[top:top + 4, left:left + 3])
        tops.add(top)
    assert tops == set(range(7))
    with pytest.raises(ValueError, match="smaller than the crop"):
        himg.random_crop(img, (11, 3), seed=0)


def test_random_flip_seeded() -> None:
    img = np.arange(2 * 5 * 3).reshape(2, 5, 3)
    outcomes = []
    for s in range(100):
        out = himg.random_flip_left_right(img, seed=s)
        np.testing.assert_array_equal(out, himg.random_flip_left_right(img, seed=s))
        flipped = np.array_equal(out, img[:, ::-1])
        assert flipped or np.array_equal(out, img)
        outcomes.append(flipped)
    assert 30 < sum(outcomes) < 70
    rng = np.random.default_rng(0)
    batch = np.stack([img] * 64)
    out = himg.random_flip_left_right(batch, seed=rng)
    flips = [np.array_equal(x, img[:, ::-1]) for x in out]
    assert all(f or np.array_equal(x, img) for f, x in zip(flips, out)) and 10 < sum(flips) < 54


def test_image_code_is_found_from_headrace_image() -> None:
    """headrace.image is the entry point: its docstring maps every image module (the folder reader by its
    home, headrace.io: image does not import io, tests/test_layers.py), and the format helpers are reachable
    from it."""
    import importlib

    import headrace.image.formats as formats

    assert himg.IMAGE_EXTENSIONS is formats.IMAGE_EXTENSIONS
    assert himg.image_format(b"\x89PNG\r\n") == "png" and himg.image_format(b"RIFF....WEBPVP8 ") == "webp"
    assert himg.image_format(b"????", "x.TIFF") == "tiff"
    for module in ("headrace.image.formats", "headrace.image.photos", "headrace.io.image_folder",
                   "headrace.convert.sources.images", "headrace.train.data"):
        assert f"``{module}``" in himg.__doc__ or f"(``{module}``)" in himg.__doc__, module
        importlib.import_module(module if module != "headrace.io.image_folder" else "headrace.io._image_folder")


def test_photo_regions_make_more_classes_from_the_regions_of_each_photograph() -> None:
    """``regions=2``: 24 classes, photograph x half; a crop of a left half resembles the photograph's left half
    more than its right half; ``regions=1`` is the original 12-class generator, byte for byte."""
    pytest.importorskip("skimage")
    from headrace.image.photos import PHOTO_CLASSES, iter_photo_jpegs, photo_classes

    names = photo_classes(2)
    assert len(names) == 24 and list(names) == sorted(names) and names[:2] == ("astronaut-r0c0", "astronaut-r0c1")
    assert photo_classes(1) == PHOTO_CLASSES and len(photo_classes(4)) == 48
    made = list(iter_photo_jpegs(48, (64, 48), regions=2, seed=3))
    assert [label for _, label in made] == [i % 24 for i in range(48)]
    assert [d for d, _ in iter_photo_jpegs(5, (64, 48), seed=3)] == \
        [d for d, _ in iter_photo_jpegs(5, (64, 48), seed=3, regions=1)]
    # a synthetic "photograph" whose red channel is 200 * x / width and green a constant 200: red / green of a
    # crop is its centre's x / width whatever the brightness change, so it tells which half it came from
    from headrace.image.photos import _region_crop

    h, w = 300, 400
    photo = np.zeros((h, w, 3), np.uint8)
    photo[..., 0] = (200 * np.arange(w) / w).astype(np.uint8)
    photo[..., 1] = 200
    rng = np.random.default_rng(0)
    for row, col, rows, cols in ((0, 0, 1, 2), (0, 1, 1, 2), (1, 0, 2, 2), (1, 1, 2, 2)):
        xs = []
        for _ in range(20):
            crop = _region_crop(photo, (32, 24), (row, col), (rows, cols), rng).astype(np.float64)
            xs.append(crop[..., 0].mean() / crop[..., 1].mean())
        # every centre in its half (to rounding), and on average well inside it
        assert (max(xs) < 0.51 and np.mean(xs) < 0.35) if col == 0 else (min(xs) > 0.49 and np.mean(xs) > 0.65), xs
    with pytest.raises(ValueError, match="regions=3: the regions per photograph must be one of 1, 2, 4, 6, 9"):
        next(iter_photo_jpegs(1, regions=3))
