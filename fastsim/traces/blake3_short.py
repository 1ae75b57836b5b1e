"""BLAKE3 of a short message (at most one 1024-byte chunk), in pure Python.

Dynamo's weka importer names each trace file's requests after the first 16 hex digits of the
BLAKE3 hash of the file's relative path; those names order the requests (and so the round-robin
assignment), so fastsim needs the same digits. Paths are short: one chunk, no tree. Written from
the BLAKE3 specification (O'Connor, Aumasson, Neves, Wilcox-O'Hearn, 2020).
"""

from __future__ import annotations

import struct

__all__ = ["blake3_hex"]

_IV = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_PERM = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
_CHUNK_START, _CHUNK_END, _ROOT = 1, 2, 8
_M = 0xFFFFFFFF


def _rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & _M


def _g(s, a, b, c, d, x, y):
    s[a] = (s[a] + s[b] + x) & _M
    s[d] = _rotr(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & _M
    s[b] = _rotr(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b] + y) & _M
    s[d] = _rotr(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & _M
    s[b] = _rotr(s[b] ^ s[c], 7)


def _compress(cv, block, counter, block_len, flags):
    m = list(struct.unpack("<16I", block))
    s = list(cv) + list(_IV[:4]) + [counter & _M, (counter >> 32) & _M, block_len, flags]
    for r in range(7):
        _g(s, 0, 4, 8, 12, m[0], m[1])
        _g(s, 1, 5, 9, 13, m[2], m[3])
        _g(s, 2, 6, 10, 14, m[4], m[5])
        _g(s, 3, 7, 11, 15, m[6], m[7])
        _g(s, 0, 5, 10, 15, m[8], m[9])
        _g(s, 1, 6, 11, 12, m[10], m[11])
        _g(s, 2, 7, 8, 13, m[12], m[13])
        _g(s, 3, 4, 9, 14, m[14], m[15])
        if r < 6:
            m = [m[i] for i in _PERM]
    return [s[i] ^ s[i + 8] for i in range(8)]


def blake3_hex(data: bytes) -> str:
    """The 32-byte BLAKE3 digest of ``data`` (len <= 1024) as lowercase hex."""
    if len(data) > 1024:
        raise ValueError("blake3_hex hashes at most one 1024-byte chunk")
    blocks = [data[i:i + 64] for i in range(0, len(data), 64)] or [b""]
    cv = list(_IV)
    for i, blk in enumerate(blocks):
        flags = (_CHUNK_START if i == 0 else 0) | ((_CHUNK_END | _ROOT) if i == len(blocks) - 1 else 0)
        cv = _compress(cv, blk.ljust(64, b"\0"), 0, len(blk), flags)
    return struct.pack("<8I", *cv).hex()
