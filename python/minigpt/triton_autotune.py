"""The Triton softmax's autotune cache: which launch configuration won for a shape bucket.

A JSON file beside the CUDA autotuner's (`$XDG_CACHE_HOME/minigpt/triton_autotune.json`, else
`~/.cache/minigpt/triton_autotune.json`; `MINIGPT_TRITON_AUTOTUNE` overrides the path), keyed as
the CUDA autotuner's cache is (src/kernels/cuda/autotune_cache.h): the GPU's name and compute
capability, the versions of what builds and runs the kernel (Triton, torch's CUDA runtime, the
driver), the SHA-256 of the kernels' source, and the shape bucket. An entry is used only when
every field matches, so an entry from another GPU, another Triton or edited kernels is never
used. Writes merge with what is on disk and go through a temporary file and a rename, so two
processes tuning at once leave a valid file; a corrupt file is ignored with a warning and
rewritten on the next save.

What this module does not do: launch or time kernels (triton_softmax.py does both).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

FORMAT = "minigpt triton softmax autotune v1"


def default_path() -> Path:
    if os.environ.get("MINIGPT_TRITON_AUTOTUNE"):
        return Path(os.environ["MINIGPT_TRITON_AUTOTUNE"])
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "minigpt" / "triton_autotune.json"


def shape_bucket(rows: int, cols: int) -> str:
    """Rows by the next power of two (they change only the number of programs), cols exactly
    (the block sizes and chunk counts depend on them): "V600_B4096", as the CUDA cache."""
    p = 1
    while p < rows:
        p *= 2
    return f"V{cols}_B{p}"


def source_sha256(*texts: str) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
    return h.hexdigest()


def make_key(torch, triton, source_hash: str, rows: int, cols: int) -> dict:
    """The key fields of an entry for the current GPU (torch's current device)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "gpu_name": props.name,
        "cc": f"{props.major}.{props.minor}",
        "triton": triton.__version__,
        "cuda_runtime": torch.version.cuda,
        "driver": _driver_version(torch),
        "source_sha256": source_hash,
        "bucket": shape_bucket(rows, cols),
    }


def key_str(key: dict) -> str:
    return "|".join(f"{k}={key[k]}" for k in sorted(key))


def _driver_version(torch) -> str:
    try:
        return str(torch.cuda.driver_version()) if hasattr(torch.cuda, "driver_version") else "unknown"
    except Exception:  # an older torch without the call
        return "unknown"


class Cache:
    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_path()
        self.entries = self._read()

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            print(f"minigpt: warning: Triton autotune cache {self.path} is unreadable ({e}); "
                  "ignoring it (it will be rewritten)", file=sys.stderr)
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
            print(f"minigpt: warning: Triton autotune cache {self.path} is not a {FORMAT!r} file; "
                  "ignoring it (it will be rewritten)", file=sys.stderr)
            return {}
        return data["entries"]

    def find(self, key: dict) -> dict | None:
        """The stored entry if every key field matches; else None."""
        e = self.entries.get(key_str(key))
        if not isinstance(e, dict) or e.get("key") != key or not isinstance(e.get("config"), dict):
            return None
        return e

    def put(self, key: dict, config: dict, us: float, candidates: list) -> None:
        self.entries[key_str(key)] = {"key": key, "config": config, "us": us, "candidates": candidates}

    def save(self) -> None:
        """Merges with the file on disk now, then writes atomically (temporary + rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        merged = Cache.__new__(Cache)
        merged.path = self.path
        on_disk = merged._read()
        on_disk.update(self.entries)
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"format": FORMAT, "entries": on_disk}, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.entries = on_disk
