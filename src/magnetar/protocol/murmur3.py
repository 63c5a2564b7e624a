"""Murmur3 32-bit hash, as Pulsar uses it for key routing and Key_Shared ranges."""

from __future__ import annotations

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    h = seed & _M32
    n = len(data)
    tail = n & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _C1) & _M32
        k = _rotl(k, 15)
        k = (k * _C2) & _M32
        h ^= k
        h = _rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & _M32
    rem = n & 3
    if rem:
        k = 0
        if rem == 3:
            k ^= data[tail + 2] << 16
        if rem >= 2:
            k ^= data[tail + 1] << 8
        k ^= data[tail]
        k = (k * _C1) & _M32
        k = _rotl(k, 15)
        k = (k * _C2) & _M32
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def key_hash(key: bytes | str) -> int:
    """Pulsar's ``Murmur3_32Hash.makeHash``: the hash with the sign bit cleared."""
    data = key.encode() if isinstance(key, str) else key
    return murmur3_32(data) & 0x7FFFFFFF


KEY_SHARED_HASH_RANGE = 65536


def sticky_key_hash(key: bytes | str) -> int:
    """Slot in Key_Shared's 0..65535 hash space."""
    return key_hash(key) % KEY_SHARED_HASH_RANGE
