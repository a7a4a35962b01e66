"""`prf_uniform` (dbanon.algorithms.ina) compiled: the same keyed BLAKE2b, bit for bit, over
keys as the bytes COPY streamed them (one blob, each key's length).

The reference keeps a Python loop, one hashlib call per row and column, which cost a publish
of a million rows seconds; here BLAKE2b (RFC 7693) runs in numba over every row at once: the
state after the secret's key block is computed once per parameter block (digest size, salt),
then each row's message is compressed from that state. The messages, the parameters and the
conversion to [-1, 1) are the reference's, so a release keeps every row's noise (tested against
hashlib on random secrets, keys and values, for every keying).
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

KEYINGS = ("row", "value", "tuple")

_IV = np.array([
    0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
    0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179,
], dtype=np.uint64)  # fmt: skip
_BLOCK = 128


@njit(cache=True, inline="always")
def _rotr(x: np.uint64, n: int) -> np.uint64:
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@njit(cache=True, inline="always")
def _g(a: np.uint64, b: np.uint64, c: np.uint64, d: np.uint64, x: np.uint64,
       y: np.uint64) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:  # fmt: skip
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@njit(cache=True)
def _compress(h: np.ndarray, m: np.ndarray, t: int, last: bool) -> None:
    """BLAKE2b's F: h updated in place by one block, its 16 message words `m` (little
    endian), `t` bytes hashed so far (below 2^64: the counter's high word is 0), `last` for
    the final block. The working vector and the message are locals and the twelve rounds are
    written out (each G's message words constants), so that all stays in registers: twice as
    fast as a loop over the SIGMA table."""
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = _IV[0], _IV[1], _IV[2], _IV[3]
    v12, v13, v14, v15 = _IV[4] ^ np.uint64(t), _IV[5], _IV[6], _IV[7]
    if last:
        v14 = ~v14
    m0, m1, m2, m3, m4, m5, m6, m7 = m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
    m8, m9, m10, m11, m12, m13, m14, m15 = m[8], m[9], m[10], m[11], m[12], m[13], m[14], m[15]
    # round 1 (the message words in the order of RFC 7693's SIGMA, rows 0-9, 0, 1)
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m0, m1)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m2, m3)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m4, m5)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m6, m7)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m8, m9)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m10, m11)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m12, m13)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m14, m15)
    # round 2
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m14, m10)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m4, m8)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m9, m15)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m13, m6)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m1, m12)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m0, m2)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m11, m7)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m5, m3)
    # round 3
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m11, m8)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m12, m0)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m5, m2)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m15, m13)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m10, m14)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m3, m6)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m7, m1)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m9, m4)
    # round 4
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m7, m9)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m3, m1)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m13, m12)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m11, m14)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m2, m6)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m5, m10)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m4, m0)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m15, m8)
    # round 5
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m9, m0)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m5, m7)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m2, m4)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m10, m15)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m14, m1)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m11, m12)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m6, m8)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m3, m13)
    # round 6
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m2, m12)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m6, m10)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m0, m11)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m8, m3)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m4, m13)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m7, m5)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m15, m14)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m1, m9)
    # round 7
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m12, m5)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m1, m15)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m14, m13)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m4, m10)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m0, m7)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m6, m3)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m9, m2)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m8, m11)
    # round 8
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m13, m11)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m7, m14)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m12, m1)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m3, m9)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m5, m0)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m15, m4)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m8, m6)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m2, m10)
    # round 9
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m6, m15)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m14, m9)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m11, m3)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m0, m8)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m12, m2)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m13, m7)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m1, m4)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m10, m5)
    # round 10
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m10, m2)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m8, m4)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m7, m6)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m1, m5)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m15, m11)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m9, m14)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m3, m12)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m13, m0)
    # round 11
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m0, m1)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m2, m3)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m4, m5)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m6, m7)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m8, m9)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m10, m11)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m12, m13)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m14, m15)
    # round 12
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m14, m10)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m4, m8)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m9, m15)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m13, m6)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m1, m12)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m0, m2)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m11, m7)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m5, m3)
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@njit(cache=True)
def keyed_state(secret: np.ndarray, digest_size: int, salt: int) -> np.ndarray:
    """The state once the secret's key block is hashed (the secret 1..64 bytes; message bytes
    must follow), for this digest size and a salt whose first 8 bytes are `salt` (little
    endian) and the rest zero, as hashlib.blake2b(key=, digest_size=, salt=) sets them."""
    h = _IV.copy()
    h[0] ^= np.uint64(0x01010000 | (len(secret) << 8) | digest_size)
    h[4] ^= np.uint64(salt)
    block = np.zeros(16, np.uint64)
    raw = block.view(np.uint8)
    raw[: len(secret)] = secret
    _compress(h, block, _BLOCK, False)
    return h


@njit(cache=True)
def _hash(start: np.ndarray, words: np.ndarray, n: int, h: np.ndarray) -> None:
    """h = the state after the message of n >= 1 bytes held in `words` (zero past its end,
    to its last block's end), from the keyed state `start`."""
    h[:] = start
    blocks = (n + _BLOCK - 1) // _BLOCK
    for b in range(blocks):
        last = b == blocks - 1
        _compress(h, words[16 * b : 16 * b + 16], _BLOCK + (n if last else _BLOCK * (b + 1)),
                  last)  # fmt: skip


@njit(cache=True)
def prf_words(secret: np.ndarray, blob: np.ndarray, lens: np.ndarray, bits: np.ndarray,
              keying: int) -> np.ndarray:  # fmt: skip
    """The reference's 64-bit words (n, m): per row i, the key blob[start_i:start_i +
    lens[i]] (rows one after another), its values' IEEE bits `bits[i]`; keying 0 row (one
    hash per column: key, NUL, column as 4 bytes), 1 value (and the value's 8 bytes),
    2 tuple (one hash of key, NUL and every value, 64 bytes of output per salt)."""
    n, cols = bits.shape
    out = np.empty((n, cols), np.uint64)
    _words(secret, blob, lens, bits, keying, out)
    return out


@njit(cache=True, nogil=True)
def prf_floats(secret: np.ndarray, blob: np.ndarray, lens: np.ndarray, bits: np.ndarray,
               keying: int) -> np.ndarray:  # fmt: skip
    """`prf_words` as the reference turns them into [-1, 1): (w >> 11) * 2^-52 - 1, each
    step exact but the last, rounded as numpy rounds it (one array, not two)."""
    n, cols = bits.shape
    words = np.empty((n, cols), np.uint64)
    _words(secret, blob, lens, bits, keying, words)
    out = words.view(np.float64)  # in place: each word is read before its float is written
    scale = 2.0**-52
    for i in range(n):
        for j in range(cols):
            out[i, j] = np.float64(words[i, j] >> np.uint64(11)) * scale - 1.0
    return out


@njit(cache=True)
def _words(secret: np.ndarray, blob: np.ndarray, lens: np.ndarray, bits: np.ndarray,
           keying: int, out: np.ndarray) -> None:  # fmt: skip
    n, cols = bits.shape
    most = 0
    for i in range(n):
        most = max(most, lens[i])
    words = np.zeros(16 * ((most + 13 + 8 * cols) // _BLOCK + 1), np.uint64)
    msg = words.view(np.uint8)  # the message of a row, zero past its end
    h = np.empty(8, np.uint64)
    if keying == 2:
        salts = (8 * cols + 63) // 64
        starts = np.empty((salts, 8), np.uint64)
        for s in range(salts):
            starts[s] = keyed_state(secret, min(64, 8 * cols - 64 * s), s)
    else:
        starts = np.empty((1, 8), np.uint64)
        starts[0] = keyed_state(secret, 8, 0)
    used = 0  # bytes of msg the previous row wrote
    p = 0
    for i in range(n):
        k = max(lens[i], 0)
        size = k + 1 + (8 * cols if keying == 2 else 4 + 8 * (keying == 1))
        msg[size:used] = 0
        used = size
        head = msg[:k]
        key = blob[p : p + k]
        for b in range(k):
            head[b] = key[b]
        p += k
        msg[k] = 0
        row = bits[i]
        if keying == 2:
            for j in range(cols):
                _put64(msg, k + 1 + 8 * j, row[j])
            for s in range(starts.shape[0]):
                _hash(starts[s], words, size, h)
                for w in range(min(8, cols - 8 * s)):
                    out[i, 8 * s + w] = h[w]
            continue
        for j in range(cols):
            msg[k + 1] = j & 255
            msg[k + 2] = (j >> 8) & 255
            msg[k + 3] = (j >> 16) & 255
            msg[k + 4] = (j >> 24) & 255
            if keying == 1:
                _put64(msg, k + 5, row[j])
            _hash(starts[0], words, size, h)
            out[i, j] = h[0]


@njit(cache=True, inline="always")
def _put64(msg: np.ndarray, p: int, w: np.uint64) -> None:
    for b in range(8):
        msg[p + b] = (w >> np.uint64(8 * b)) & np.uint64(255)


def prf_uniform_blob(
    secret: bytes, blob: np.ndarray, lens: np.ndarray, values: np.ndarray, keyed: str
) -> np.ndarray:
    """dbanon.algorithms.ina.prf_uniform of keys given as their UTF-8 bytes one after another
    (`lens`: each key's length): (n, m) values uniform in [-1, 1), equal bit for bit."""
    if keyed not in KEYINGS:
        raise ValueError(f"keyed must be one of {KEYINGS}, got {keyed!r}")
    if not 1 <= len(secret) <= 64:
        raise ValueError(f"a BLAKE2b key has 1 to 64 bytes, not {len(secret)}")
    x = np.ascontiguousarray(np.asarray(values, dtype="<f8") + 0.0)  # -0.0 as 0.0
    n = x.shape[0]
    if len(lens) != n:
        raise ValueError(f"{len(lens)} keys for {n} rows")
    if sys.byteorder != "little":  # the kernel reads bytes as native words: the reference
        from dbanon.algorithms.ina import prf_uniform

        raw, ends = np.asarray(blob, np.uint8).tobytes(), np.cumsum(lens).tolist()
        keys = [raw[e - w : e].decode() for e, w in zip(ends, np.asarray(lens).tolist(),
                                                         strict=True)]  # fmt: skip
        return prf_uniform(secret, keys, x, keyed)
    return prf_floats(
        np.frombuffer(secret, dtype=np.uint8).copy(), np.ascontiguousarray(blob, np.uint8),
        np.ascontiguousarray(lens, np.int64), x.view(np.uint64).reshape(x.shape),
        KEYINGS.index(keyed),
    )  # fmt: skip
