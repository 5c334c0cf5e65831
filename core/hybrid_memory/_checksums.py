"""CRC-32 checksums of saved index files, so that damage that keeps an array's shape is caught on load.

The dense and BM25 indexes are derived data: the store holds every chunk and vector, and an index that does not
load is rebuilt from it. A damaged file whose arrays keep their shapes (a flipped bit in a vector, a score
overwritten) passed every shape and count check and silently changed rankings. Each save now records, in its
``manifest.json``, the CRC-32 (``zlib.crc32``, as the filter index's ``meta.json`` does) of every file it
wrote or linked, per block of :data:`BLOCK_BYTES`; :func:`verify_files` checks them on load, and a mismatch
raises ValueError naming the file, which the engines' loaders turn into a warning and a rebuild from the store.

CRC-32 detects every burst error up to 32 bits and any other damage with probability 1 - 2**-32 per block; it is
no defence against a deliberate forgery (an attacker able to write the folder can write the store too).

Cost: one read of every file on open (zlib's CRC-32 runs at about 2.3 GB/s a core here; blocks are checked by
up to :data:`THREADS` threads, ``zlib.crc32`` and file reads release the GIL). Files named by a token never
change once written (a dense base, an IVF, a BM25 main segment): a save that hard-links one reuses the checksum
recorded when it was written or verified, so a save still costs what it writes.
"""

from __future__ import annotations

import mmap
import os
import zlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["BLOCK_BYTES", "THREADS", "file_checksums", "verify_files"]

BLOCK_BYTES = 1 << 26
"""Bytes per checksummed block (64 MiB): large enough that a block's overhead is nil, small enough that a
1.5 GB vector file splits into 23 blocks that several threads check at once."""

THREADS = min(4, os.cpu_count() or 1)
"""Threads that checksum blocks at once on load and save."""


def _block_crc(path: Path, index: int) -> int:
    """CRC-32 of block ``index`` of the file, read through a memory map: no copy of the bytes is made (a
    ``read`` of 64 MiB allocates and faults in a fresh buffer each time, which cost 5x the CRC itself)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        start = index * BLOCK_BYTES
        if start >= size:
            return 0
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
            block = view[start : start + BLOCK_BYTES]
            try:
                return zlib.crc32(block)
            finally:
                block.release()


def _crcs(paths: list[Path]) -> list[list[int]]:
    """For each path, the CRC-32 of each of its blocks (an empty file: one block, CRC 0)."""
    jobs = [
        (i, path, block)
        for i, path in enumerate(paths)
        for block in range(max(1, -(-path.stat().st_size // BLOCK_BYTES)))
    ]
    if len(jobs) <= 1 or THREADS == 1:
        values = [_block_crc(path, block) for _, path, block in jobs]
    else:
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            values = list(pool.map(lambda job: _block_crc(job[1], job[2]), jobs))
    out: list[list[int]] = [[] for _ in paths]
    for (i, _path, _block), value in zip(jobs, values, strict=True):
        out[i].append(value)
    return out


def file_checksums(
    directory: Path, names: Iterable[str], known: Mapping[str, list[int]] | None = None
) -> dict[str, list[int]]:
    """``{name: [crc32 of each BLOCK_BYTES block]}`` for the files ``names`` (relative to ``directory``, POSIX
    separators), taking a name's value from ``known`` instead of reading the file when ``known`` holds it (an
    immutable, token-named file whose checksum was recorded when it was written or verified).

    Raises:
        OSError: a file cannot be read.
    """
    directory = Path(directory)
    known = known or {}
    names = sorted(set(names))
    todo = [name for name in names if name not in known]
    computed = dict(zip(todo, _crcs([directory / name for name in todo]), strict=True))
    return {name: list(known[name]) if name in known else computed[name] for name in names}


def verify_files(directory: Path, recorded: Mapping[str, list[int]] | None) -> None:
    """Check every file ``recorded`` names (relative to ``directory``) against its recorded block checksums.

    ``recorded`` None (a save written before checksums existed) checks nothing.

    Raises:
        ValueError: a file is missing, or differs from its checksum (its name and the first bad block in the
            message).
    """
    if recorded is None:
        return
    if not isinstance(recorded, Mapping):
        raise ValueError("the manifest's checksums are not an object")
    directory = Path(directory)
    names = sorted(recorded)
    paths = [directory / name for name in names]
    for name, path in zip(names, paths, strict=True):
        if not path.is_file():
            raise ValueError(f"{name} is missing")
    for name, expected, got in zip(names, (recorded[n] for n in names), _crcs(paths), strict=True):
        if [int(v) for v in expected] != got:
            bad = next(
                (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if int(a) != b),
                min(len(expected), len(got)),
            )
            raise ValueError(
                f"{name} does not match its CRC-32 (block {bad} of {len(got)} differs: damaged, or from another save)"
            )
