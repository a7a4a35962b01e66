"""The compiled PRF (dbanon.algorithms.prf) equals the reference, hashlib's BLAKE2b in
dbanon.algorithms.ina.prf_uniform, bit for bit: a release keeps every row's noise."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dbanon.algorithms.ina import prf_uniform
from dbanon.algorithms.prf import prf_uniform_blob, prf_words
from dbanon.db.stream import Keys


def _blob(keys: list[str]) -> Keys:
    return Keys.of(keys)


def _random_keys(rng: np.random.Generator, n: int) -> list[str]:
    """Keys of every length around BLAKE2b's block (128 bytes), unicode of 1 to 4 UTF-8
    bytes, the empty key."""
    alphabet = ["a", "Z", "0", " ", "é", "ß", "漢", "字", "🙂", "\x00", "'", "\\"]
    keys = ["", "1", "é漢字🙂", "x" * 115, "x" * 116, "x" * 122, "x" * 123, "x" * 127,
            "x" * 128, "x" * 255, "x" * 256, "y" * 1000]  # fmt: skip
    for _ in range(n):
        length = int(rng.integers(0, 300)) if rng.random() < 0.3 else int(rng.integers(0, 12))
        keys.append("".join(rng.choice(alphabet, size=length)))
    return keys


def _values(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    x = rng.normal(size=(n, m)) * 10.0 ** rng.integers(-3, 6, size=(n, m))
    specials = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 5e-324, 1e308,
                np.frombuffer(bytes.fromhex("0100000000f8ff7f"), "<f8")[0]]  # a NaN payload
    for i, v in enumerate(specials):
        x[i % n, i % m] = v
    return x


@pytest.mark.parametrize("keyed", ["row", "value", "tuple"])
@pytest.mark.parametrize("m", [1, 2, 3, 7, 8, 9, 16, 17])
def test_compiled_prf_is_hashlibs_bit_for_bit(keyed: str, m: int) -> None:
    rng = np.random.default_rng(m * 7 + len(keyed))
    keys = _random_keys(rng, 300)
    x = _values(rng, len(keys), m)
    raw = _blob(keys)
    for secret in (hashlib.sha256(b"dbanon-noise:1").digest(), b"k", bytes(range(64)),
                   rng.bytes(17)):  # fmt: skip
        want = prf_uniform(secret, keys, x, keyed)  # type: ignore[arg-type]
        got = prf_uniform_blob(secret, raw.blob, raw.lens, x, keyed)
        assert got.tobytes() == want.tobytes()


def test_minus_zero_hashes_as_zero_and_nan_as_its_bits() -> None:
    keys = ["a", "a", "a"]
    raw = _blob(keys)
    x = np.array([[0.0], [-0.0], [np.nan]])
    u = prf_uniform_blob(b"s" * 32, raw.blob, raw.lens, x, "value")
    assert u[0, 0] == u[1, 0] != u[2, 0]
    assert np.array_equal(u, prf_uniform(b"s" * 32, keys, x, "value"))


def test_tuple_keying_over_eight_columns_salts_each_64_bytes() -> None:
    """Nine columns: 64 bytes of output with salt 0, then 8 with salt 1, as hashlib gives."""
    secret = b"secret of 32 bytes, for a test.."
    words = prf_words(np.frombuffer(secret, np.uint8).copy(), np.frombuffer(b"k", np.uint8),
                      np.array([1]), np.zeros((1, 9), np.uint64), 2)  # fmt: skip
    msg = b"k\x00" + bytes(72)
    first = hashlib.blake2b(msg, key=secret, digest_size=64, salt=bytes(16)).digest()
    second = hashlib.blake2b(msg, key=secret, digest_size=8,
                             salt=(1).to_bytes(16, "little")).digest()  # fmt: skip
    assert words.tobytes() == first + second


def test_refuses_what_the_reference_cannot_mean() -> None:
    raw = _blob(["a"])
    with pytest.raises(ValueError, match="keyed"):
        prf_uniform_blob(b"s", raw.blob, raw.lens, np.zeros((1, 1)), "column")
    with pytest.raises(ValueError, match="1 to 64 bytes"):
        prf_uniform_blob(b"", raw.blob, raw.lens, np.zeros((1, 1)), "row")
    with pytest.raises(ValueError, match="keys for"):
        prf_uniform_blob(b"s", raw.blob, raw.lens, np.zeros((2, 1)), "row")
