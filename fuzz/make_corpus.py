#!/usr/bin/env python3
"""Regenerates the fuzz seed corpora under fuzz/corpus/<format>/: a few tiny valid files
(written by numpy / the safetensors package, the writers users have) and a few invalid ones
(each near a check the loader makes). Run from anywhere: python3 fuzz/make_corpus.py"""
import io
import json
import os
import struct
import zipfile

import numpy as np
from safetensors.numpy import save

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(fmt, name, data):
    os.makedirs(os.path.join(HERE, fmt), exist_ok=True)
    with open(os.path.join(HERE, fmt, name), "wb") as f:
        f.write(data)


def st_raw(header, data=b""):
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + data


def npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def npy_raw(header, data=b"", major=1):
    h = header.encode()
    n = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + n + h + data


def npz_bytes(arrays, compressed):
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


# safetensors ------------------------------------------------------------------------------
a = np.arange(6, dtype=np.float32).reshape(2, 3)
put("safetensors", "valid_two_tensors", save({"w": a, "b": np.ones(3, np.float32)},
                                             metadata={"format": "minigpt", "vocab": '["a","b"]'}))
put("safetensors", "valid_dtypes", save({"i": np.arange(2, dtype=np.int64), "u": np.arange(3, dtype=np.uint8),
                                         "h": np.zeros((1, 2), np.float16), "e": np.zeros((0, 2), np.float32)}))
put("safetensors", "valid_empty", st_raw("{}      "))
put("safetensors", "bad_overlap", st_raw('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                         '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12)))
put("safetensors", "bad_size", st_raw('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8)))
put("safetensors", "bad_header_len", struct.pack("<Q", 1 << 40) + b"{}")
put("safetensors", "bad_duplicate", st_raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                           '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2)))

# npy --------------------------------------------------------------------------------------
put("npy", "valid_f4", npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3)))
put("npy", "valid_i8", npy_bytes(np.array([[3, 17, 42]], dtype=np.int64)))
put("npy", "valid_i4_scalar", npy_bytes(np.array(7, dtype=np.int32)))
put("npy", "valid_u1", npy_bytes(np.frombuffer(b'{"config": {}}', dtype=np.uint8)))
put("npy", "valid_v3_f8", npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n", bytes(8), 3))
put("npy", "bad_object", npy_raw("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n", bytes(8)))
put("npy", "bad_fortran", npy_raw("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }\n", bytes(16)))
put("npy", "bad_short", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n", bytes(8)))

# npz --------------------------------------------------------------------------------------
arrays = {"wte.weight": np.arange(8, dtype=np.float32).reshape(2, 4),
          "__metadata__": np.frombuffer(json.dumps({"config": {}, "vocab": ["a"]}).encode(), np.uint8)}
put("npz", "valid_savez", npz_bytes(arrays, False))
put("npz", "valid_savez_compressed", npz_bytes(arrays, True))
plain = io.BytesIO()
with zipfile.ZipFile(plain, "w", zipfile.ZIP_DEFLATED) as z:  # no zip64 extras, data descriptor off
    z.writestr("x.npy", npy_bytes(np.zeros(5, np.float32)))
put("npz", "valid_zipfile_deflate", plain.getvalue())
bad = bytearray(npz_bytes({"a": np.arange(4, dtype=np.float32)}, False))
bad[bad.index(b"\x93NUMPY") + 70] ^= 1
put("npz", "bad_crc", bytes(bad))
put("npz", "bad_truncated", npz_bytes(arrays, True)[:-30])
